"""Base vs scratch per shift and rank, paired by seed: built from the runs at the learning rate
chosen on validation, beside the student's difference, and copied unchanged into lora.md."""

from __future__ import annotations

from pathlib import Path

from lab.studies.lora.lrsweep_pattern import pattern_section
from lab.studies.lora.records import load_parts

DOCS = Path(__file__).resolve().parents[4] / "docs" / "results"
OUT = DOCS / "lora_mnist5k"  # its records: docs/results/lora_mnist5k/runs/lrsweep/


def _row(lines: list[str], shift: str, rank: int) -> list[str]:
    (row,) = [line for line in lines if line.startswith(f"| {shift} | {rank} |")]
    return [cell.strip() for cell in row.strip("|").split("|")]


def test_rows_pair_the_chosen_runs_by_seed_beside_the_students_difference():
    lines = pattern_section(load_parts([OUT / "runs"])["lrsweep"])
    cells = _row(lines, "inverted", 4)
    assert cells[2] == "16.32" and cells[4] == "69.67"  # the student's two numbers
    assert cells[6] == "-2.6 / -2.4 / -2.6" and cells[7] == "0+ 3− of 3"
    assert cells[8] == "-53.4"  # 16.32 − 69.67
    assert _row(lines, "inverted", 16)[7] == "0+ 2− of 3 (1 equal)"


def test_one_changed_test_accuracy_changes_its_row_and_no_other():
    runs = load_parts([OUT / "runs"])["lrsweep"]
    before = pattern_section(runs)
    chosen = [
        r
        for r in runs
        if r.info["domain"] == "inverted"
        and r.info["adaptation"] == "lora"
        and r.info["rank"] == 4
        and r.info["head"] == "lora"
        and r.seed == 0
    ]
    for run in chosen:  # every lr: the row's chosen one among them
        run.metrics["acc"] = 0.10
    after = pattern_section(runs)
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].startswith("| inverted | 4 |")


def test_no_lora_rows_no_section():
    runs = [
        r for r in load_parts([OUT / "runs"])["lrsweep"] if r.info["adaptation"] in ("base", "full")
    ]
    assert pattern_section(runs) == []


def test_the_mnist5k_table_on_lora_md_is_the_generated_one():
    generated = (DOCS / "lora_mnist5k.md").read_text()
    section = generated[generated.index("### LoRA on the base against LoRA from scratch") :]
    (table,) = [b.strip() for b in section.split("\n\n") if b.startswith("| shift |")][:1]
    assert table in (DOCS / "lora.md").read_text()
