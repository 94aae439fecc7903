"""lora.md's hand-written notes against the committed CSVs: the counts of rows choosing an edge of
the learning-rate grid that it states (issue 46), and the mnist5k base-vs-scratch table it copies.
The pages' generated tables and CSVs are rebuilt from their records by ``test_plan_pages``."""

from __future__ import annotations

import re
from collections import defaultdict

from tests.docs.pages import RESULTS, runs


def _by_row(summary: str) -> dict[tuple[str, str, str, str], list[dict[str, str]]]:
    rows = defaultdict(list)
    for r in runs(summary):
        rows[(r["domain"], r["method"], r["rank"], r["head"])].append(r)
    return {key: sorted(found, key=lambda r: float(r["lr"] or 0)) for key, found in rows.items()}


def _edges(summary: str, method: str) -> tuple[int, int, int]:
    """(rows, rows choosing the grid's top rate, rows choosing its bottom rate) of a method."""
    top = bottom = total = 0
    for (_, m, _, _), lrs in _by_row(summary).items():
        if m != method:
            continue
        chosen = next(r["lr"] for r in lrs if r["chosen"] == "True")
        total += 1
        top += chosen == lrs[-1]["lr"]
        bottom += chosen == lrs[0]["lr"]
    return total, top, bottom


def test_lora_md_counts_the_edge_bound_mnist5k_choices():
    """The sentence of lora.md that says how many mnist5k rows still choose an edge rate."""
    notes = (RESULTS / "lora.md").read_text()
    found = re.search(
        r"LoRA on the base: (\d+) of (\d+) rows at the top rate, (\d+) at the bottom; "
        r"LoRA from scratch: (\d+) of (\d+) at the top, (\d+) at the bottom; "
        r"full fine-tuning: (\d+) of (\d+) at the top",
        " ".join(notes.split()),
    )
    assert found, "lora.md lost its count of edge-bound mnist5k rows"
    said = [int(n) for n in found.groups()]
    lora = _edges("lora_mnist5k_lrsweep_summary", "lora")
    scratch = _edges("lora_mnist5k_lrsweep_summary", "lora_scratch")
    full = _edges("lora_mnist5k_lrsweep_summary", "full")
    assert said == [lora[1], lora[0], lora[2], scratch[1], scratch[0], scratch[2], full[1], full[0]]


def test_the_mnist5k_table_on_lora_md_is_the_generated_one():
    generated = (RESULTS / "lora_mnist5k.md").read_text()
    section = generated[generated.index("### LoRA on the base against LoRA from scratch") :]
    (table,) = [b.strip() for b in section.split("\n\n") if b.startswith("| shift |")][:1]
    assert table in (RESULTS / "lora.md").read_text()
