"""README is a user's page, and every page of the docs links to and names only what the repository holds."""

from __future__ import annotations

import fnmatch
import os
import re
from pathlib import Path

import pytest

from onceflow.compat.moved_modules import MOVED, RENAMED
from tests.support import ROOT

PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md")),
         *sorted(ROOT.glob("CHANGELOG*"))]
OLD_MODULES = {**{old: new for old, (new, _) in MOVED.items()}, **RENAMED}
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#[^)]*)?\)")


def test_readme_is_at_most_200_lines():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines: move what a first-time user does not need to a page of docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_of_the_repository(page):
    targets = [m["target"] for m in _LINK.finditer(page.read_text()) if "://" not in m["target"]]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to what is not in the repository: {missing}"


# -- every module and test the docs name exists --------------------------------------------------------------------
# What a page names in `code` (and, for paths under the repository's folders, in its prose too): a path
# (`tests/integration/sinks/kafka/test_sink.py`, `sinks/kafka/participant.py`, `test_sink.py`, a glob
# `test_apache_*.py`), a test id (`path.py::test_name`), a dotted module with or without its package
# (`onceflow.sinks.kafka.answers.COMMIT_ANSWERS`, `core.planning.interventions.is_blank`). Each must resolve against the
# repository as it is: a path from the repository's root, tests/, a package's root or the folder above it; a
# module's names in its source. Placeholders (`<batch id>`, `…`), URLs, what onceflow writes at run time
# (`_onceflow/`, `.onceflow/`) and code blocks (the reader's own files) are left alone.
PACKAGES = {"onceflow": ROOT / "src", "onceflow_devkit": ROOT / "devkit", "onceflow_examples": ROOT / "examples",
            "onceflow_postgres_sink": ROOT / "examples" / "postgres_sink"}
# Where a relative path may start: the repository, each package's root and the folder above it, tests/.
BASES = [ROOT, ROOT / "tests", *PACKAGES.values(), *(folder / name for name, folder in PACKAGES.items())]
TOP = {p.name for p in ROOT.iterdir() if not p.name.startswith((".venv", ".onceflow", ".git", ".hypothesis", ".ruff"))}
FIRST_SEGMENTS = TOP | set(PACKAGES) | {p.name for base in BASES[1:] for p in base.iterdir() if p.is_dir()}
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"^```.*?^```", re.S | re.M)
# What a name is read with: a paragraph, a list item or a table row.
_BLOCKS = re.compile(r"\n\s*\n|\n(?=\s*(?:[-*]|\d+\.) |\|)")
_SPLIT = re.compile(r"[\s,;()\[\]\"'=|]+")
_PLACEHOLDER = re.compile(r"[<>{}…%$]|\.\.\.|://|^[/~\-]")
_PATHLIKE = re.compile(r"^[\w.*/\-]+(?:::\w+)?$")
_DOTTED = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")


def _files() -> set[str]:
    """Every file and folder of the repository, relative to its root (what the bare file names resolve against)."""
    found = set()
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "build")]
        found.update(Path(folder, f).relative_to(ROOT).as_posix() for f in files)
    return found


FILES = _files()


def _tokens(paragraph: str) -> list[tuple[str, bool]]:
    """Each token of ``paragraph`` with whether it was written as code (an inline span)."""
    spans = [m.group(1) for m in _CODE_SPAN.finditer(paragraph)]
    tokens = [(t, True) for span in spans for t in _SPLIT.split(span)]
    tokens += [(t, False) for t in _SPLIT.split(_CODE_SPAN.sub(" ", paragraph))]
    return [(t.rstrip(".:"), code) for t, code in tokens if t.rstrip(".:")]


def _module_file(dotted: str) -> Path | None:
    """The source of module ``dotted`` (``onceflow.sinks.kafka``, ...), or None."""
    root, *rest = dotted.split(".")
    if root not in PACKAGES:
        return None
    path = PACKAGES[root].joinpath(root, *rest)
    return next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)


def _names_defined(source: Path, names: list[str]) -> bool:
    text = source.read_text()
    return all(re.search(rf"\b{re.escape(name)}\b", text) for name in names)


def _path_problem(token: str, folders: list[str]) -> str | None:
    """Why a path the docs name does not resolve (None: it does, or it is no path of the repository). A bare
    file name is looked for in ``folders``, those its paragraph (or list item, or table row) names, if it names
    any (`tests/integration/kafka`: ... `test_withheld.py`), else anywhere."""
    path, _, test = token.partition("::")
    if "/" not in path:
        if not path.endswith(".py"):
            return None
        matches = [f for f in FILES if fnmatch.fnmatch(f.rsplit("/", 1)[-1], path)]
        if not matches:
            return "no file of that name in the repository"
        near = [f for f in matches if any(f.startswith(folder + "/") for folder in folders)]
        if folders and not near:
            return f"not in {', '.join(folders)}, the folders its paragraph names, but in {', '.join(sorted(matches))}"
        matches = near or matches
    else:
        if path.split("/")[0] not in FIRST_SEGMENTS:
            return None
        path = path.rstrip("/")
        matches = [p for base in BASES for p in (sorted(base.glob(path)) if "*" in path else [base / path]) if p.exists()]
        if not matches:
            head, _, attribute = path.partition(".")  # or a module's name: `sinks/writer_options.armed_as_job`
            module = next((base / f"{head}.py" for base in BASES if (base / f"{head}.py").is_file()), None)
            if attribute and module is not None and _names_defined(module, attribute.split(".")):
                return None
            return "no such file or folder, from the repository's root or a package's"
        matches = [str(m.relative_to(ROOT)) for m in matches]
    if test and not any(re.search(rf"^\s*(async\s+)?def {re.escape(test)}\(", (ROOT / m).read_text(), re.M)
                        for m in matches if (ROOT / m).is_file()):
        return f"no test {test} in {', '.join(sorted(matches))}"
    return None


def _module_problem(dotted: str, paragraph: str) -> str | None:
    """Why a dotted name the docs give does not resolve (None: it does, or it names no module of onceflow's
    packages: a header, a setting, another library's option)."""
    parts = dotted.split(".")
    # A module's name starts with one of onceflow's modules, now or before it moved: with its package (not
    # `onceflow.batch`, a header), or without it, then from a package and its module (`core.states.derive_state`;
    # not `kafka.isolation.level`, a Spark option, nor `ledger.decision.after_write`, a fault point).
    relative = parts[0] not in PACKAGES
    parts = ["onceflow", *parts] if relative else parts
    prefixes = [".".join(parts[:i]) for i in range(len(parts), 1, -1)]  # the longest first
    start = ".".join(parts[: 3 if relative else 2])
    if _module_file(start) is None and not (start in OLD_MODULES if relative else any(p in OLD_MODULES for p in prefixes)):
        return None
    for i, module in zip(range(len(parts), 1, -1), prefixes):
        if module in OLD_MODULES:
            if re.search(r"still\s+import", paragraph):
                return None  # a page telling that the old names still import
            return f"an old module name ({module} moved to {OLD_MODULES[module]}): name the module as it is now"
        source = _module_file(module)
        if source is not None:
            if _names_defined(source, parts[i:]):
                return None
            return f"{module} defines no {'.'.join(parts[i:])}"
    return "no such module"


def _stale_names(text: str) -> list[str]:
    """What ``text`` names that does not resolve. Code blocks are left out: their paths are the reader's own
    (`dags/orders_exactly_once.py` in an example DAG file)."""
    stale = []
    for paragraph in _BLOCKS.split(_FENCE.sub("\n\n", text)):
        tokens = [(t, code) for t, code in _tokens(paragraph) if not _PLACEHOLDER.search(t) and _PATHLIKE.match(t)]
        folders = sorted({str(p.relative_to(ROOT)) for t, _ in tokens if "/" in t and t.split("/")[0] in FIRST_SEGMENTS
                          for p in [base / t.rstrip("/") for base in BASES] if p.is_dir()})
        for token, code in tokens:
            problem = _path_problem(token, folders) if ("/" in token or token.endswith(".py") or "::" in token) else None
            if problem is None and code and _DOTTED.match(token) and not token.endswith(".py"):
                problem = _module_problem(token, paragraph)
            if problem is not None and (code or "/" in token):
                stale.append(f"{token}: {problem}")
    return sorted(set(stale))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_and_test_a_page_names_exists(page):
    stale = _stale_names(page.read_text())
    assert not stale, f"{page.relative_to(ROOT)} names what the repository does not hold: {stale}"


@pytest.mark.parametrize("text, problem", [
    ("the header format (`onceflow/kafka/headers.py`)", "no such file or folder"),
    ("see `tests/integration/kafka/test_sink.py` for the kills", "no such file or folder"),
    ("`sinks/kafka/answers.py`, `onceflow.sinks.kafka.answers.COMMIT_ANSWERS`", None),
    ("`tests/integration/sinks/iceberg/test_iceberg_sink.py::test_no_such_test`", "no test test_no_such_test"),
    ("`onceflow.sinks.kafka.participant.NO_SUCH_TABLE`", "defines no NO_SUCH_TABLE"),
    ("(`kafka.visibility.confirm_aborted`)", "an old module name (onceflow.kafka.visibility"),
    ("old names (`onceflow.kafka.sink`) still import", None),
    ("`onceflow.batch` headers, `kafka.isolation.level=read_committed`, `<warehouse>/_onceflow/<pipeline>/`", None),
    ("`integration/sinks/kafka/test_apache_*.py`, `test_zombie_across_batches.py`", None),
    ("`no_such_module_anywhere.py`", "no file of that name"),
    ("- `tests/integration/kafka`: a killed writer (`test_withheld.py`)", "not in tests/integration/kafka"),
    ("(`spark/writer_options.armed_as_job`)", "no such file or folder"),
    ("(`sinks/writer_options.armed_as_job`, `onceflow/spark/submit.py`, `onceflow_devkit/doc_blocks.py`)", None),
])
def test_the_rules_catch_stale_names_and_leave_ordinary_text_alone(text, problem):
    stale = _stale_names(text)
    assert (problem in " ".join(stale)) if problem else not stale, stale
