"""Tables the summary pages copy from generated result files stay copies: a table on a summary
page whose header line is that of a table a study or report command wrote (every other ``.md``
under ``docs/results/``) must have every row verbatim in such a table. A copy edited by hand, or
left behind when its file was regenerated, fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.pages import RESULTS

# The pages written by hand around the generated files (they cite them).
SUMMARIES = (
    "polynomial.md",
    "sequence_reversal.md",
    "detection.md",
    "detection_earlier.md",
    "image_completion.md",
    "warm_start.md",
    "lora.md",
    "lora_mnist5k.md",
)


def _tables(path: Path) -> list[tuple[str, list[str]]]:
    """(header line, body lines) of every markdown table in ``path``."""
    lines, found, i = path.read_text().splitlines(), [], 0
    while i < len(lines) - 1:
        if lines[i].startswith("|") and lines[i + 1].startswith("|---"):
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                j += 1
            found.append((lines[i], lines[i + 2 : j]))
            i = j
        else:
            i += 1
    return found


def _generated() -> dict[str, set[str]]:
    """header line -> every body line under it in the generated files."""
    rows: dict[str, set[str]] = {}
    for path in sorted(RESULTS.glob("*.md")):
        if path.name not in SUMMARIES:
            for header, body in _tables(path):
                rows.setdefault(header, set()).update(body)
    return rows


@pytest.mark.parametrize("page", SUMMARIES)
def test_copied_tables_are_verbatim_rows_of_generated_ones(page):
    generated = _generated()
    for header, body in _tables(RESULTS / page):
        if header in generated:
            stale = [row for row in body if row not in generated[header]]
            assert not stale, f"{page}: rows in no generated table under {header!r}: {stale}"


def test_the_summary_pages_do_copy_generated_tables():
    generated = _generated()
    copies = sum(header in generated for page in SUMMARIES for header, _ in _tables(RESULTS / page))
    assert copies >= 16  # polynomial.md 10, sequence_reversal.md 4, image_completion.md 2
