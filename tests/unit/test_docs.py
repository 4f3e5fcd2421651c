"""README is a user's page, and every page of the docs links only to what the repository holds."""

from __future__ import annotations

import re

import pytest

from tests.support import ROOT

PAGES = [ROOT / "README.md", ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\((?P<target>[^)\s#]+)(?:#[^)]*)?\)")


def test_readme_is_at_most_200_lines():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 200, f"README.md has {lines} lines: move what a first-time user does not need to a page of docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_of_the_repository(page):
    targets = [m["target"] for m in _LINK.finditer(page.read_text()) if "://" not in m["target"]]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to what is not in the repository: {missing}"
