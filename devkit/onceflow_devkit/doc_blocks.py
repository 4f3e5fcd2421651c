"""Generated text in the docs: what lies between ``<!-- NAME begin -->`` and ``<!-- NAME end -->``.

A figure the docs take from a saved run (``make test``'s log, ``make demo``'s
log, the chaos runs' JSON) sits between two such markers: the tests read the
block and compare it with what the run's module makes from its source, and the
module writes it back after a new run. The markers stay; only the text between
them changes.
"""

from __future__ import annotations

from pathlib import Path


def _span(page: Path, name: str) -> tuple[str, int, int]:
    """The page's text and where block ``name``'s text starts and stops (its markers' own lines excluded)."""
    text, begin, end = page.read_text(), f"<!-- {name} begin -->", f"<!-- {name} end -->"
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        raise ValueError(f"{page} lost the markers of its generated block {name!r}")
    return text, start + len(begin), stop


def read(page: Path, name: str) -> str:
    """The text of block ``name`` on ``page``; an error naming both when the markers are gone."""
    text, start, stop = _span(page, name)
    return text[start:stop].strip("\n")


def write(page: Path, name: str, block: str) -> None:
    """``page`` with ``block`` between the markers of ``name``, each marker on its own line."""
    text, start, stop = _span(page, name)
    page.write_text(text[:start] + "\n" + block.strip("\n") + "\n" + text[stop:])
