"""The provider's connection types are listed once, in onceflow/provider.py: README.md and docs/pipelines.md
show them from there, and no other line of the docs lists them by hand."""

from __future__ import annotations

import re

import pytest

from onceflow.provider import get_provider_info
from onceflow_devkit import doc_blocks, provider_doc
from tests.support import ROOT

DECLARED = [entry["connection-type"] for entry in get_provider_info()["connection-types"]]
_BLOCK = re.compile(rf"<!-- {provider_doc.BLOCK} begin -->.*?<!-- {provider_doc.BLOCK} end -->", re.S)


@pytest.mark.parametrize("page", sorted(provider_doc.PAGES))
def test_the_page_shows_the_connection_types_the_provider_declares(page):
    assert doc_blocks.read(ROOT / page, provider_doc.BLOCK) == provider_doc.PAGES[page](), (
        f"{page} is behind onceflow/provider.py's connection types: python -m onceflow_devkit.provider_doc writes it again")


def test_the_phrase_names_every_declared_type_and_counts_them(monkeypatch):
    phrase = provider_doc.connection_types()
    assert phrase.startswith(f"{provider_doc._NUMBERS[len(DECLARED)]} connection types of its own: ")
    assert all(f"`{name}`" in phrase for name in DECLARED)
    one_more = {"connection-type": "onceflow_extra", "hook-class-name": "x.Hook", "hook-name": "onceflow extra"}
    declared = get_provider_info()

    monkeypatch.setattr(provider_doc, "get_provider_info",
                        lambda: {**declared, "connection-types": [*declared["connection-types"], one_more]})
    assert provider_doc.connection_types().startswith(f"{provider_doc._NUMBERS[len(DECLARED) + 1]} connection types")
    assert provider_doc.connection_types().endswith(" and `onceflow_extra` (onceflow extra)")


def test_no_other_line_of_the_docs_lists_the_connection_types_by_hand():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    by_hand = [f"{page.relative_to(ROOT)}: {line.strip()}" for page in pages
               for line in _BLOCK.sub("", page.read_text()).splitlines()
               if sum(f"`{name}`" in line for name in DECLARED) > 1]
    assert not by_hand, f"name the provider's connection types in the {provider_doc.BLOCK} block alone: {by_hand}"
