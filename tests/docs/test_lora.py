"""The LoRA pages' learning-rate tables and lora.md's reading of them, recomputed from the
committed per-(row, lr) CSVs: every row's validation accuracy per learning rate, its chosen rate
(bold) and its validation accuracy there, and the counts of choices at the edge of the grid that
lora.md states (issue 46); and each page's student-vs-ours table rebuilt from the committed run
records alone. A number edited on a page, or a CSV regenerated without its page, fails."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

from lab.studies.lora.lrsweep_report import sweep_section
from lab.studies.lora.records import load_parts
from tests.docs.pages import RESULTS, page_table, runs

HEADER = "| domain | method | r | head | trainable params | student (%) | ours: test (%)"
METHODS = {  # the page's words for each adaptation
    "base, trained on the original task": "base",
    "base before adaptation": "before",
    "full fine-tune": "full",
    "LoRA": "lora",
    "LoRA from scratch": "lora_scratch",
}
HEADS = {"LoRA (fc1-fc3)": "lora", "frozen (LoRA on fc1, fc2)": "frozen"}
PAGES = {"lora.md": "lora_lrsweep_summary", "lora_mnist5k.md": "lora_mnist5k_lrsweep_summary"}


@pytest.mark.parametrize("page", PAGES)
def test_the_student_table_is_rebuilt_from_the_committed_records(page):
    out = RESULTS / page.removesuffix(".md")
    lines = sweep_section(load_parts([out / "runs"])["lrsweep"])
    rebuilt = [line for line in lines if line.startswith("| ") and not line.startswith("| domain")]
    table = page_table(page, HEADER)
    assert [[c.strip() for c in line.strip("|").split("|")] for line in rebuilt] == table
    # The whole pages and CSVs, rebuilt from their plans: tests/docs/test_plan_pages.py.


def _by_row(summary: str) -> dict[tuple[str, str, str, str], list[dict[str, str]]]:
    rows = defaultdict(list)
    for r in runs(summary):
        rows[(r["domain"], r["method"], r["rank"], r["head"])].append(r)
    return {key: sorted(found, key=lambda r: float(r["lr"] or 0)) for key, found in rows.items()}


@pytest.mark.parametrize("page", PAGES)
def test_every_rows_learning_rates_are_the_summarys(page):
    summary = _by_row(PAGES[page])
    table = page_table(page, HEADER)
    assert len(table) == len(summary)
    for cells in table:
        domain, method, rank, head = cells[0], METHODS[cells[1]], cells[2], cells[3]
        key = (domain, method, "0" if rank == "–" else rank, HEADS.get(head, ""))
        lrs = summary[key]
        if method == "before":  # test only: no validation, no rate of its own
            assert cells[7:10] == ["–", "–", "–"]
            continue
        chosen = next(r for r in lrs if r["chosen"] == "True")
        per_lr = [
            f"{r['lr']}: {float(r['val_acc_mean']) * 100:.1f}" for r in lrs if r["val_acc_mean"]
        ]
        per_lr = [f"**{c}**" if c.startswith(chosen["lr"] + ":") else c for c in per_lr]
        assert cells[8] == chosen["lr"], key
        assert cells[7] == f"{float(chosen['val_acc_mean']) * 100:.1f}", key
        assert cells[9] == " · ".join(per_lr), key


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
