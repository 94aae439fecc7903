"""warm_start.md's summary and paired tables, checked cell by cell against the tables that
the study's plans (``python -m lab.studies.sweep --plan configs/studies/warm_start_*.yaml``)
generate from the committed run records
(``warm_start_{digits,reversal}.md``): the page rearranges those cells, and a cell that is not
the generated one fails."""

from __future__ import annotations

import re

import pytest

from tests.docs.pages import page_table

PAGE = "warm_start.md"
BACKENDS = {
    "Performer m = 64": "performer_m64",
    "Performer m = 256": "performer_m256",
    "linear": "linear",
    "PolySketch": "polysketch",
}
CONDITIONS = ["zero-shot", "fine-tune", "fine-tune + redraw", "scratch"]
SCRATCH_LONG = "scratch, base + fine-tune steps"
SUMMARY = "| backend | zero-shot | fine-tune (200) | + redraw | scratch (200) | "
COMPARISONS = [
    "fine-tune − scratch",
    "fine-tune − scratch, base + fine-tune steps",
    "fine-tune + redraw − fine-tune",
    "zero-shot − fine-tune",
]


def _generated(task: str, header: str) -> dict[tuple[str, str], list[str]]:
    """(backend, condition or comparison) -> the other cells of a generated table."""
    rows = page_table(f"warm_start_{task}.md", header)
    return {(row[0].strip("`"), row[1]): row[2:] for row in rows}


def _short(cell: str) -> str:
    """A generated paired cell as the page writes it: minus signs, no ``n=3:``, no ``0=`` and no
    sign p (at n = 3 it is 0.25 at best: the page says so once)."""
    cell = cell.replace("-", "−").replace("(n=3: ", "(")
    return re.sub(r"( 0=)?, sign p [0-9.]+\)$", ")", cell)


def _page(header: str, *, whole: bool = False) -> dict[str, list[str]]:
    rows = page_table(PAGE, header, whole=whole)
    return {row[0]: [c.replace("**", "") for c in row[1:]] for row in rows}


def test_digits_summary_and_paired_tables_are_the_generated_ones():
    runs = _generated("digits", "| backend | condition | n | test acc (%)")
    summary = _page(SUMMARY + "scratch (1,000) |")
    assert summary.pop("softmax base (800)") == [runs[("softmax", "base")][1], "–", "–", "–", "–"]
    for label, backend in BACKENDS.items():
        cells = [runs.get((backend, c), ["", "–"])[1] for c in [*CONDITIONS, SCRATCH_LONG]]
        assert summary.pop(label) == cells, label
    assert not summary
    paired = _generated("digits", "| backend | comparison | test acc (%)")
    table = _page("| backend | fine-tune − scratch (same steps) |")
    for label, backend in BACKENDS.items():
        cells = [_short(paired[(backend, c)][0]) if (backend, c) in paired else "–"
                 for c in COMPARISONS]  # fmt: skip
        assert table[label] == cells, label


@pytest.mark.parametrize("column", range(5))
def test_reversal_summary_is_the_generated_table(column):
    runs = _generated("reversal", "| backend | condition | converged | token acc (%)")
    summary = _page(SUMMARY + "scratch (800) |")
    condition = [*CONDITIONS, SCRATCH_LONG][column]
    base = runs[("softmax", "base")]
    if column == 0:
        assert summary["softmax base (600)"][0] == f"{base[0]} · {base[1].split()[0]}"
    for label, backend in BACKENDS.items():
        cell = summary[label][column]
        if (backend, condition) not in runs:
            assert cell == "–", label
            continue
        converged, token, exact = runs[(backend, condition)][:3]
        expected = f"{converged} · {token.split()[0]}"
        if not converged.startswith("0/"):  # exact-sequence accuracy where any run converged
            expected += f" (exact {exact.split()[0]})"
        assert cell == expected, (label, condition)


def test_reversal_paired_table_is_the_generated_one():
    paired = _generated("reversal", "| backend | comparison | token acc (%)")
    table = _page(
        "| backend | fine-tune − scratch (same steps) | fine-tune − scratch (same total steps) "
        "| redraw − no redraw |",
        whole=True,
    )
    for label, backend in BACKENDS.items():
        for comparison, cell in zip(COMPARISONS[:3], table[label], strict=True):
            if (backend, comparison) not in paired:
                assert cell == "–", label
                continue
            token, _, exact = cell.partition("; exact ")
            generated = paired[(backend, comparison)]
            assert token == _short(generated[0]), (label, comparison)
            assert not exact or exact == _short(generated[1]), (label, comparison)
