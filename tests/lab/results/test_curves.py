"""Training curves read back from the runs' records (``curves.csv``)."""

from __future__ import annotations

import csv

from attn_lightning.records import run_files
from lab.results.curves import _shown_steps, append_curves, curves_table
from lab.results.records import RunResult


def test_shown_steps_keep_the_last_and_at_most_max_columns():
    assert _shown_steps([1, 2, 3], 8) == [1, 2, 3]
    assert _shown_steps(list(range(20, 820, 20)), 8) == [100, 200, 300, 400, 500, 600, 700, 800]
    shown = _shown_steps(list(range(1, 11)), 4)
    assert shown[-1] == 10 and len(shown) <= 4


def test_curves_table_can_show_every_step_with_its_own_digits():
    rows = [
        {"variant": "v", "seed": 0, "optimizer_steps": step, "val/token_acc": step / 100}
        for step in range(10, 100, 10)
    ]
    header, _, row = curves_table(rows, "val/token_acc", max_columns=None, digits=1)
    assert header.count("|") == 2 + 9 + 1  # every one of the 9 steps
    assert row.startswith("| `v` | 0 | 10.0 | 20.0 |")
    assert curves_table(rows, "val/token_acc")[0].count("|") <= 2 + 8 + 1  # at most 8 steps
    assert "| 10.00 |" in curves_table(rows[:1], "val/token_acc")[2]  # its column's 2 digits


def test_curves_of_finished_runs_only_from_their_records(tmp_path):
    runs = []
    for seed, offset in ((0, 0.0), (1, 0.1)):
        folder = tmp_path / f"v-s{seed}"
        folder.mkdir()
        # A record's step is the logger's (the step just taken): 19 is 20 optimiser steps.
        curves = {(19, "val/acc"): 0.5 + offset, (39, "val/acc"): 0.8 + offset}
        run_files.write_curves(folder, {**curves, (39, "train/loss_step"): 1.5})
        runs.append(RunResult("v", seed, 1.0, "ok", log_dir=str(folder)))
    runs.append(RunResult("v", 2, None, "crashed", log_dir=str(tmp_path / "v-s0")))
    runs.append(RunResult("w", 0, 1.0, "ok"))  # no record folder: no rows
    out = tmp_path / "study"
    out.with_name("study.md").write_text("# tables\n")
    append_curves(out, runs, "val/acc")
    with out.with_name("study_curves.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [(r["seed"], r["optimizer_steps"]) for r in rows] == [
        ("0", "20"),
        ("0", "40"),
        ("1", "20"),
        ("1", "40"),
    ]
    assert rows[3]["val/acc"] == "0.9"
    md = out.with_name("study.md").read_text()
    assert md.startswith("# tables\n\n`val/acc` per run") and "| `v` | 0 | 50.00 | 80.00 |" in md
    assert "| variant | seed | 20 | 40 |" in md
    assert "| `v` | 1 | 60.00 | 90.00 |" in md  # in the test column's scale (%)
    # Lightning's per-step name of a tag is found under the tag.
    append_curves(out, runs[:1], "train/loss")
    with out.with_name("study_curves.csv").open() as f:
        assert [r["train/loss"] for r in csv.DictReader(f)] == ["1.5"]
    append_curves(tmp_path / "none", runs, "val/nothing")
    assert not (tmp_path / "none_curves.csv").exists()
