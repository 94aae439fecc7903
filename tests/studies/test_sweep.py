"""The sweep CLI: backend specs, aggregation, and one tiny real sweep writing md + csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from attn_lightning.studies.sweep import RunResult, main, run_label, summarize

ROOT = Path(__file__).resolve().parents[2]


def test_run_label_is_file_name_safe():
    assert run_label("polynomial:form=sketch") == "polynomial_form-sketch"


def test_summarize_mean_std_and_failures():
    results = [
        RunResult("a", 0, 10.0, "ok", {"test/token_acc": 1.0, "test/exact_acc": 1.0}),
        RunResult("a", 1, 20.0, "ok", {"test/token_acc": 0.98, "test/exact_acc": 0.5}),
        RunResult("a", 2, 5.0, "crashed"),
        RunResult("b", 0, 1.0, "ok", {"test/token_acc": 0.995}),
    ]
    rows = {r["backend"]: r for r in summarize(results, metric="test/token_acc", threshold=0.99)}
    a, b = rows["a"], rows["b"]
    assert (a["runs"], a["crashed"], a["not_converged"]) == (3, 1, 1)
    assert a["test/token_acc_mean"] == pytest.approx(0.99)
    assert a["test/token_acc_std"] == pytest.approx(0.0141421, rel=1e-4)  # sample std
    assert a["seconds_mean"] == pytest.approx(15.0)  # crashed runs excluded
    assert (b["not_converged"], b["test/token_acc_std"]) == (0, 0.0)
    assert b["test/exact_acc_mean"] is None


FAKE_TRAIN = """
import json, sys
args = dict(a[2:].split("=", 1) for a in sys.argv[2:] if a.startswith("--") and "=" in a)
name = json.loads(args["model.init_args.attention"])["name"]
if name == "crash":
    sys.exit(1)
acc = {"good": 1.0, "flaky": 0.9 + 0.1 * (args["seed_everything"] == "0")}[name]
record = {"global_step": 7, "metrics": {}, "test": {"test/token_acc": acc, "test/exact_acc": acc}}
open(args["metrics_file"], "w").write(json.dumps(record))
"""


def test_sweep_counts_crashes_and_unconverged_runs(tmp_path, monkeypatch):
    # A stand-in train.py (no torch import) keeps this fast; the real one runs below.
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAIN)
    out = tmp_path / "fake"
    results = main(
        [
            "--config",
            "unused.yaml",
            "--backends",
            "good",
            "flaky",
            "crash",
            "--seeds",
            "0",
            "1",
            "--train-script",
            str(script),
            "--out",
            str(out),
        ]
    )
    assert [r.status for r in results] == ["ok"] * 4 + ["crashed"] * 2
    with (tmp_path / "fake.csv").open() as f:
        rows = {row["backend"]: row for row in csv.DictReader(f)}
    assert rows["good"]["not_converged"] == "0"
    assert rows["flaky"]["not_converged"] == "1"
    assert float(rows["flaky"]["test/token_acc_mean"]) == pytest.approx(0.95)
    assert rows["crash"]["crashed"] == "2"
    assert "| `crash` | 2 | 0 | 2 |" in (tmp_path / "fake.md").read_text()


def test_sweep_cli_runs_train_py_and_writes_tables(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "results" / "tiny"
    results = main(
        [
            "--config",
            str(ROOT / "configs" / "reversal" / "base.yaml"),
            "--config",
            str(ROOT / "configs" / "presets" / "debug.yaml"),
            "--backends",
            "linear:feature_map=relu",
            "--seeds",
            "0",
            "--set",
            "data.init_args.train_size=32",
            "--set",
            "data.init_args.val_size=16",
            "--set",
            "data.init_args.test_size=16",
            "--set",
            "data.init_args.batch_size=16",
            "--set",
            "trainer.max_steps=2",
            "--out",
            str(out),
        ]
    )
    assert [(r.status, r.global_step) for r in results] == [("ok", 2)]
    md = (out.parent / "tiny.md").read_text()
    assert "python -m attn_lightning.studies.sweep --config" in md
    assert "| `linear:feature_map=relu` | 1 |" in md
    with (out.parent / "tiny.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert 0.0 <= float(row["test/token_acc_mean"]) <= 1.0
    with (out.parent / "tiny_runs.csv").open() as f:
        assert len(list(csv.DictReader(f))) == 1
    ckpt_dir = tmp_path / "checkpoints" / "sweep-tiny" / "linear_feature_map-relu-s0"
    assert (ckpt_dir / "last.ckpt").is_file()
