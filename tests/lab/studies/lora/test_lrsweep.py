"""The LoRA study's ``lrsweep`` report: selection on validation, the student's numbers as data,
partial grids, base vs scratch. The student's numbers themselves and the tables built from the
committed records are the pages' (rebuilt byte for byte: ``tests/docs/test_plan_pages.py``)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attn_lightning.records.files import write_csv
from lab.results.records import RunResult
from lab.results.references import ENV
from lab.studies.lora.lrsweep_report import (
    choose_lr,
    missing_runs,
    outcome_cell,
    pattern_section,
    student_numbers,
    sweep_section,
)
from tests.lab.studies.lora.rows import as_runs

PROTOCOL = {"source": "digits", "levels": 2, "angle": 90.0, "normalize": "none"}
PROTOCOL |= {"max_epochs": 60, "patience": 10}
FULL = ("inverted", "full", 0, "", "0.003")  # a row of the table: the learning rate is its choice


def _row(method: str, lr: str, seed: int, val: float | str, test: float | str, **extra) -> dict:
    """A row of the per-run CSV (the adaptation in its ``method`` column)."""
    row = {"part": "lrsweep", **PROTOCOL, "domain": "inverted", "method": method, "rank": 0}
    row.update(head="", base_lr="0.003", lr=lr, seed=seed, status="ok", val_acc=val, acc=test)
    row.update(trainable_params=55050, epochs=20, seconds=10)
    return {**row, **extra}


def test_choose_lr_follows_validation_where_test_disagrees(tmp_path):
    # 0.001 is best on validation, 0.01 on test: the choice is 0.001 and its test mean.
    rows = [
        _row("full", "0.001", s, val, test)
        for s, val, test in ((0, 0.90, 0.50), (1, 0.80, 0.60), (2, 0.85, 0.55))
    ]
    rows += [_row("full", "0.01", s, 0.70, 0.99) for s in (0, 1, 2)]
    rows += [_row("full", "0.1", 0, 0.99, 0.99, status="crashed")]  # crashed: never chosen
    read = as_runs(tmp_path / "lora", rows)
    choice = choose_lr(read)[FULL]
    assert choice.lr == "0.001"
    assert choice.val_by_lr == {"0.001": pytest.approx(0.85), "0.01": pytest.approx(0.70)}
    assert sorted(r.metrics["acc"] for r in choice.runs) == [0.5, 0.55, 0.6]
    # Test accuracy plays no part: without it the choice is the same.
    blind = [replace(r, metrics={k: v for k, v in r.metrics.items() if k != "acc"}) for r in read]
    assert choose_lr(blind)[FULL].lr == "0.001"
    # A tie on validation goes to the smaller learning rate.
    tie = [_row("full", lr, 0, 0.5, 0.5) for lr in ("0.01", "0.001")]
    assert choose_lr(as_runs(tmp_path / "tie", tie))[FULL].lr == "0.001"


def test_student_numbers_are_data_read_from_the_references(tmp_path, monkeypatch):
    rows = [{"domain": "rotated", "adaptation": "full", "rank": 0, "head": "", "test_acc": 50.5}]
    write_csv(tmp_path / "lora_student.csv", rows, {"source": "a test"})
    monkeypatch.setenv(ENV, str(tmp_path))
    assert student_numbers() == {("rotated", "full", 0, ""): 50.5}
    monkeypatch.setenv(ENV, str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError, match=r"lora_student\.csv"):
        student_numbers()


def test_outcome_cell_counts_seeds_above_chance_in_seed_order():
    runs = [
        RunResult("lora", seed, 1.0, "ok", metrics={"acc": acc})
        for seed, acc in ((2, 0.948), (0, 0.096), (1, 0.948))
    ]
    assert outcome_cell(runs) == "94.8 [52.2, 94.8] · 2/3 > 20 % · 9.6 / 94.8 / 94.8"
    assert outcome_cell([]) == "–"


def test_rows_of_a_partial_grid_are_marked_with_what_they_miss(tmp_path):
    full = [_row("full", lr, s, 0.9, 0.9) for lr in ("0.001", "0.003") for s in (0, 1)]
    partial = [_row("full", "0.001", s, 0.5, 0.5, domain="rotated") for s in (0, 1)]
    partial.append(_row("full", "0.003", 0, 0.8, 0.8, domain="rotated"))
    every, complete = as_runs(tmp_path / "lora", full + partial), as_runs(tmp_path / "full", full)
    missing = missing_runs(every)  # the runs as their records read back
    assert missing[("inverted", "full", 0, "")] == 0 and missing[("rotated", "full", 0, "")] == 1
    text = "\n".join(sweep_section(every))
    assert "| 0.003 (partial grid: 1 runs missing) |" in text and "partial grid" in text
    assert "partial grid" not in "\n".join(sweep_section(complete))


def test_no_lora_rows_no_pattern_section(tmp_path):
    assert pattern_section(as_runs(tmp_path / "lora", [_row("full", "0.001", 0, 0.9, 0.9)])) == []
