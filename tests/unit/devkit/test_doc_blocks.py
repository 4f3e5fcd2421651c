"""A generated block of the docs is read and rewritten between its markers, and nothing else on the page moves."""

from __future__ import annotations

import pytest

from onceflow_devkit import doc_blocks

PAGE = "# Title\n\nBefore.\n<!-- figures begin -->\nold figures\n<!-- figures end -->\nAfter.\n"


def test_a_block_is_read_and_rewritten_between_its_markers(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    assert doc_blocks.read(page, "figures") == "old figures"
    doc_blocks.write(page, "figures", "new figures\nand one more line\n")
    assert page.read_text() == PAGE.replace("old figures", "new figures\nand one more line")
    assert doc_blocks.read(page, "figures") == "new figures\nand one more line"


def test_a_page_without_the_markers_names_the_page_and_the_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE.replace("<!-- figures end -->", ""))
    with pytest.raises(ValueError, match=r"page.md lost the markers of its generated block 'figures'"):
        doc_blocks.read(page, "figures")


def test_an_empty_block_is_filled(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- figures begin -->\n<!-- figures end -->\n")
    assert doc_blocks.read(page, "figures") == ""
    doc_blocks.write(page, "figures", "figures")
    assert page.read_text() == "<!-- figures begin -->\nfigures\n<!-- figures end -->\n"
