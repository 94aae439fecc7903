"""The detection study's tables: the cost columns, and the machine line of the runs' records."""

from __future__ import annotations

import csv

from lab.results.records import RunResult
from lab.studies.detection.tables import write
from tests.lab.studies.detection.runs import fake_record


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


def test_the_machine_line_is_the_runs_own(tmp_path):
    env = {"platform": "Linux-x", "device": "cuda:0", "device_name": "H100", "python": "3.11.7"}
    folder = fake_record(tmp_path, "e", "softmax", 0, test={"test/mAP": 0.3}, environment=env)
    ran = RunResult("softmax", 0, 1.0, "ok", {"test/mAP": 0.3}, 500, log_dir=str(folder))
    converted = RunResult("mean", 0, 1.0, "ok", info={"machine": "Linux-y, x86_64, Python 3.11"})
    write(tmp_path / "t", [ran, converted], {}, command="cmd", jobs=2)
    line = "Machines: Linux-x, H100, Python 3.11.7; Linux-y, x86_64, Python 3.11; 2 runs at a time."
    assert f"\n{line}\n" in (tmp_path / "t.md").read_text()
