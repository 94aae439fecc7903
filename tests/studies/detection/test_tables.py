"""The detection study's tables: the cost columns, and earlier runs read back from committed
tables."""

from __future__ import annotations

import csv
from pathlib import Path

from attn_lightning.results import write_csv
from attn_lightning.results.records import RunResult
from attn_lightning.results.tables import write_tables
from attn_lightning.studies.detection.tables import read_earlier, write


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


def test_earlier_runs_come_from_the_first_table_that_holds_them(tmp_path):
    def table(name: str, runs: list[RunResult], curve_value: float) -> Path:
        out = tmp_path / name
        write_tables(out, runs, command="x", metrics=["test/mAP"], label="variant")
        curve = [
            {"variant": r.variant, "seed": r.seed, "optimizer_steps": 500, "val/mAP": curve_value}
            for r in runs
        ]
        write_csv(out.with_name(name + "_curves.csv"), curve)
        return out

    first = table("grid", [RunResult("a", 0, 1.0, "ok", {"test/mAP": 0.1})], 0.1)
    second = table(
        "main",
        [
            RunResult("a", 0, 1.0, "ok", {"test/mAP": 0.9}),
            RunResult("a", 1, 1.0, "ok", {"test/mAP": 0.8}),
        ],
        0.9,
    )
    earlier, curves = read_earlier([first, second])
    assert earlier["a", 0].value("test/mAP") == 0.1 and earlier["a", 1].value("test/mAP") == 0.8
    assert sorted((c["seed"], c["val/mAP"]) for c in curves) == [(0, 0.1), (1, 0.9)]
