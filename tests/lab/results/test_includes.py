"""Include blocks: the builder copies the named table of a sibling page into the block, and a
block naming no table there is refused with the tables that there are."""

from __future__ import annotations

import re

import pytest

from lab.results.includes import main, refresh

SOURCE = "# a page\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n## Spikes\n\n| c |\n|---|\n| 3 |\n"


def _page(anchor: str, body: str = "| old |\n") -> str:
    return f"Intro.\n\n<!-- include: source.md#{anchor} -->\n{body}<!-- /include -->\n\nEnd.\n"


@pytest.mark.parametrize(
    ("anchor", "table"),
    [("table-1", "| a | b |\n|---|---|\n| 1 | 2 |\n"), ("spikes", "| c |\n|---|\n| 3 |\n")],
)
def test_a_stale_block_is_refreshed_and_then_current(tmp_path, anchor, table):
    (tmp_path / "source.md").write_text(SOURCE)
    (tmp_path / "summary.md").write_text(_page(anchor))
    assert main([str(tmp_path), "--check"]) == 1
    assert refresh(tmp_path) == [tmp_path / "summary.md"]
    assert (tmp_path / "summary.md").read_text() == _page(anchor, table)
    assert main([str(tmp_path), "--check"]) == 0


@pytest.mark.parametrize(
    ("anchor", "says"),
    [("table-3", "has tables 1 to 2"), ("nowhere", "'a-page', 'spikes'"), ("table-x", "#table-1")],
)
def test_a_block_naming_no_table_is_refused(tmp_path, anchor, says):
    (tmp_path / "source.md").write_text(SOURCE)
    (tmp_path / "summary.md").write_text(_page(anchor))
    with pytest.raises(ValueError, match=f"include 'source.md#{anchor}'.*{re.escape(says)}"):
        refresh(tmp_path)


def test_an_unclosed_block_is_refused(tmp_path):
    (tmp_path / "source.md").write_text(SOURCE)
    (tmp_path / "summary.md").write_text("<!-- include: source.md#table-1 -->\n| old |\n")
    with pytest.raises(ValueError, match="not closed"):
        refresh(tmp_path)


def test_a_table_of_a_page_in_a_subfolder_is_quoted(tmp_path):
    """Benchmarks write their pages into folders of their own (``image_decode/decode_cpu.md``):
    the target is a path under the quoting page's folder."""
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "source.md").write_text(SOURCE)
    text = "<!-- include: bench/source.md#spikes -->\n| old |\n<!-- /include -->\n"
    (tmp_path / "summary.md").write_text(text)
    assert refresh(tmp_path) == [tmp_path / "summary.md"]
    assert "| c |\n|---|\n| 3 |\n" in (tmp_path / "summary.md").read_text()
