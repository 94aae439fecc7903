"""Training curves read back from the runs' TensorBoard folders."""

from __future__ import annotations

import csv
from pathlib import Path

from attn_lightning.results.curves import (
    _shown_steps,
    append_curves,
    curve_rows,
    curves_table,
    read_curve_rows,
    read_scalars,
    write_curves,
)
from attn_lightning.results.records import RunResult


def _write_events(log_dir: Path, scalars: dict[str, list[tuple[int, float]]]) -> None:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(log_dir))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()


def test_read_scalars_keeps_more_than_the_default_sample(tmp_path):
    # EventAccumulator keeps a sample of 10,000 scalars per tag by default.
    _write_events(tmp_path, {"train/loss_spike": [(s, 0.0) for s in range(10_500)]})
    assert len(read_scalars(tmp_path)["train/loss_spike"]) == 10_500


def test_shown_steps_keep_the_last_and_at_most_max_columns():
    assert _shown_steps([1, 2, 3], 8) == [1, 2, 3]
    assert _shown_steps(list(range(20, 820, 20)), 8) == [100, 200, 300, 400, 500, 600, 700, 800]
    shown = _shown_steps(list(range(1, 11)), 4)
    assert shown[-1] == 10 and len(shown) <= 4


def test_curves_of_finished_runs_only(tmp_path):
    runs = []
    for seed, offset in ((0, 0.0), (1, 0.1)):
        log_dir = tmp_path / f"v-s{seed}"
        _write_events(log_dir, {"val/acc": [(19, 0.5 + offset), (39, 0.8 + offset)]})
        runs.append(RunResult("v", seed, 1.0, "ok", log_dir=str(log_dir)))
    runs.append(RunResult("v", 2, None, "crashed", log_dir=str(tmp_path / "v-s2")))
    runs.append(RunResult("w", 0, 1.0, "ok"))  # no log folder recorded: no rows
    rows = curve_rows(runs, "val/acc")
    assert [(r["seed"], r["optimizer_steps"]) for r in rows] == [(0, 20), (0, 40), (1, 20), (1, 40)]
    assert abs(rows[3]["val/acc"] - 0.9) < 1e-6  # float32 in the event file
    table = curves_table(rows, "val/acc")
    assert table[0] == "| variant | seed | 20 | 40 |"
    assert table[3] == "| `v` | 1 | 60.00 | 90.00 |"  # in the test column's scale (%)

    out = tmp_path / "study"
    out.with_name("study.md").write_text("# tables\n")
    append_curves(out, runs, "val/acc")
    with out.with_name("study_curves.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 4
    md = out.with_name("study.md").read_text()
    assert md.startswith("# tables\n\n`val/acc` per run") and "| `v` | 0 | 50.00 | 80.00 |" in md
    assert write_curves(tmp_path / "none", runs, "val/nothing") == []
    assert not (tmp_path / "none_curves.csv").exists()


def test_runs_read_back_from_a_csv_keep_their_earlier_curves(tmp_path):
    log_dir = tmp_path / "v-s1"
    _write_events(log_dir, {"val/acc": [(19, 0.7)]})
    out = tmp_path / "before"
    earlier = [RunResult("v", 0, 1.0, "ok", log_dir=str(tmp_path / "v-s0"))]
    _write_events(tmp_path / "v-s0", {"val/acc": [(19, 0.5), (39, 0.6)]})
    write_curves(out, earlier, "val/acc")
    rows = read_curve_rows(out.with_name("before_curves.csv"))
    assert rows[1] == {
        "variant": "v",
        "seed": 0,
        "optimizer_steps": 40,
        "val/acc": rows[1]["val/acc"],
    }
    # seed 0 now comes from a CSV (no log folder); seed 1 from its own folder
    runs = [RunResult("v", 0, 1.0, "ok"), RunResult("v", 1, 1.0, "ok", log_dir=str(log_dir))]
    merged = curve_rows(runs, "val/acc", rows)
    assert [(r["seed"], r["optimizer_steps"]) for r in merged] == [(0, 20), (0, 40), (1, 20)]
    assert curve_rows([RunResult("w", 0, 1.0, "ok")], "val/acc", rows) == []  # not w's rows
    assert read_curve_rows(tmp_path / "absent_curves.csv") == []
