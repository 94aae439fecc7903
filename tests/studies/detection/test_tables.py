"""The detection study's tables: the cost columns, and the validation curves read from the
runs' records."""

from __future__ import annotations

import csv

from attn_lightning.results.records import RunResult
from attn_lightning.studies.detection.tables import (
    curve_rows,
    machine_line_of,
    write,
    write_curves,
)
from tests.studies.detection.runs import fake_record


def test_write_adds_the_cost_columns(tmp_path):
    results = [RunResult("softmax", 0, 140.0, "ok", {"test/mAP": 0.136}, 500)]
    costs = {
        "softmax": {
            "attention params": 99840,
            "total params": 253624,
            "forward ms / image": 1.795,
            "peak forward MiB": 0.9,
            "input": "8×3×48×48",
        }
    }
    write(tmp_path / "t", results, costs, command="cmd")
    md = (tmp_path / "t.md").read_text()
    assert "| attention params | total params | forward ms / image | peak forward MiB |" in md
    assert "| 99,840 | 253,624 | 1.795 | 0.9 |" in md
    assert "Cost columns: one CPU thread, input 8×3×48×48, eval mode, no grad." in md
    with (tmp_path / "t.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert row["attention params"] == "99840" and "input" not in row


def test_curves_are_the_records_val_map_after_each_optimiser_step(tmp_path):
    runs = tmp_path / "runs"
    curve = {499: 0.1, 999: 0.3}  # a validation is logged at the index of the step just taken
    folder = fake_record(runs, "e", "softmax", 0, test={"test/mAP": 0.3}, curve=curve)
    (folder / "curves.csv").write_text(
        (folder / "curves.csv").read_text() + "999,train/loss,2.5\n"  # another tag: not shown
    )
    results = [
        RunResult("softmax", 0, 1.0, "ok", {"test/mAP": 0.3}, 1000, log_dir=str(folder)),
        RunResult("mean", 0, 1.0, "crashed", log_dir=str(folder)),  # not finished: no curve
    ]
    assert curve_rows(results) == [
        {"variant": "softmax", "seed": 0, "optimizer_steps": 500, "val/mAP": 0.1},
        {"variant": "softmax", "seed": 0, "optimizer_steps": 1000, "val/mAP": 0.3},
    ]
    write(tmp_path / "t", results, {}, command="cmd")
    write_curves(tmp_path / "t", results)
    md = (tmp_path / "t.md").read_text()
    assert "`val/mAP` per run after the number of optimiser steps" in md
    assert "| `softmax` | 0 | 0.100 | 0.300 |" in md
    assert (tmp_path / "t_curves.csv").read_text().splitlines() == [
        "variant,seed,optimizer_steps,val/mAP",
        "softmax,0,500,0.1",
        "softmax,0,1000,0.3",
    ]
    write_curves(tmp_path / "none", results[1:])  # no finished run: no file, no section
    assert not (tmp_path / "none_curves.csv").exists()


def test_the_machine_line_is_the_runs_own(tmp_path):
    env = {"platform": "Linux-x", "device": "cuda:0", "device_name": "H100", "python": "3.11.7"}
    folder = fake_record(tmp_path, "e", "softmax", 0, test={"test/mAP": 0.3}, environment=env)
    ran = RunResult("softmax", 0, 1.0, "ok", {"test/mAP": 0.3}, 500, log_dir=str(folder))
    converted = RunResult("mean", 0, 1.0, "ok", info={"machine": "Linux-y, x86_64, Python 3.11"})
    assert (
        machine_line_of([ran]) == "Machine: Linux-x, H100, Python 3.11.7; runs one after another."
    )
    assert machine_line_of([ran, converted], jobs=2) == (
        "Machines: Linux-x, H100, Python 3.11.7; Linux-y, x86_64, Python 3.11; 2 runs at a time."
    )
    assert machine_line_of([RunResult("a", 0, None, "not run")]) is None  # this machine's
    write(tmp_path / "t", [ran], {}, command="cmd")
    assert (
        "\nMachine: Linux-x, H100, Python 3.11.7; runs one after another.\n"
        in (tmp_path / "t.md").read_text()
    )
