"""The detection study's command line: tables from run records, the paired comparison with
each variant's control (the per-site table: tests/lab/benchmarks/test_cli.py)."""

from __future__ import annotations

import csv

import pytest

from lab.results.records import RunResult
from lab.studies.detection import main
from lab.studies.detection.variants import (
    DELTA_VS_CONTROL,
    WHAT_DIFFERS,
    comparisons,
)
from tests.lab.studies.detection.runs import fake_record


def _fake_metrics(logs, variant: str, seed: int, m_ap: float) -> None:
    # a finished run's record, where the runner finds it: logs/detection_report/<run>/
    test = {"test/mAP": m_ap, "test/AP50": 2 * m_ap, "test/AP75": m_ap / 2, "test/loss": 1.0}
    fit = {"val/mAP": m_ap + 0.01, "val/loss": 1.0}
    fake_record(logs, "detection_report", variant, seed, test=test, fit=fit, seconds=100.0 + seed)


def test_tables_from_existing_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "logs"
    _fake_metrics(runs, "softmax", 0, 0.1)
    _fake_metrics(runs, "softmax", 1, 0.3)
    _fake_metrics(runs, "mean", 0, 0.05)  # mean seed 1 never finished
    out = tmp_path / "table"
    argv = ["--variants", "softmax", "mean", "--seeds", "0", "1", "--out", str(out)]
    results = main(["run", *argv, "--skip-runs", "--no-costs"])
    assert [(r.variant, r.seed, r.status) for r in results] == [
        ("softmax", 0, "ok"),
        ("softmax", 1, "ok"),
        ("mean", 0, "ok"),
        ("mean", 1, "not run"),  # no record and --skip-runs: not a crash
    ]
    md = (tmp_path / "table.md").read_text()
    head = "| variant | runs | crashed | test mAP | test AP50 | test AP75 | val mAP |"
    assert head + " wall time / run (s) |" in md
    assert (
        "| `softmax` | 2 | 0 | 0.200 ± 0.141 | 0.400 ± 0.283 | 0.100 ± 0.071 | 0.210 ± 0.141 |"
        in md
    )
    assert "| `mean` | 1 | 0 | 0.050 ± 0.000 |" in md
    assert "Not run yet (no run record): `mean` seeds 1." in md
    assert "python -m lab.studies.detection run --variants softmax mean" in md
    assert "test loss" not in md and "not converged" not in md
    with (tmp_path / "table_runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["seconds"] for r in rows] == ["100.0", "101.0", "100.0"]
    assert rows[1]["test/mAP"] == "0.3"


def test_a_run_with_a_committed_record_is_not_trained_again(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "docs" / "results" / "detection" / "runs"
    test = {"test/mAP": 0.7, "test/AP50": 0.9, "test/AP75": 0.8}
    fake_record(committed, "detection_report", "softmax", 0, test=test, study="detection")
    # the same run of another experiment is not this one's
    fake_record(committed, "detection_long", "softmax", 1, test=test, study="detection")
    argv = ["run", "--variants", "softmax", "--seeds", "0", "1", "--no-costs", "--skip-runs"]
    results = main([*argv, "--out", str(tmp_path / "t")])
    assert [(r.seed, r.status) for r in results] == [(0, "ok"), (1, "not run")]
    folder = committed.relative_to(tmp_path) / "detection_report" / "softmax-s0"
    assert results[0].log_dir == str(folder)
    assert "| `softmax` | 1 | 0 | 0.700 ± 0.000 |" in (tmp_path / "t.md").read_text()


def test_publish_copies_the_finished_local_runs_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    committed = tmp_path / "docs" / "results" / "detection" / "runs" / "detection_report"
    _fake_metrics(tmp_path / "logs", "softmax", 0, 0.5)
    test = {"test/mAP": 0.4}
    fake_record(committed.parent, "detection_report", "mean", 0, test=test, study="detection")
    argv = ["run", "--variants", "softmax", "mean", "--seeds", "0", "--skip-runs", "--no-costs"]
    main([*argv, "--out", str(tmp_path / "t")])
    assert not (committed / "softmax-s0").exists()  # without --publish: nothing copied
    main([*argv, "--publish", "--out", str(tmp_path / "t")])
    assert (committed / "softmax-s0" / "record.json").read_text() == (
        tmp_path / "logs" / "detection_report" / "softmax-s0" / "record.json"
    ).read_text()
    assert sorted(p.name for p in committed.iterdir()) == ["mean-s0", "softmax-s0"]


def test_tables_compare_each_variant_with_its_control(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = tmp_path / "logs"
    for seed, m_ap in enumerate((0.20, 0.30)):
        _fake_metrics(runs, "softmax_no_qk_encoder_self", seed, m_ap)
    for seed, m_ap in enumerate((0.15, 0.21)):  # per-seed Δ -0.05, -0.09
        _fake_metrics(runs, "optimization_encoder_self", seed, m_ap)
    _fake_metrics(runs, "pool_encoder_self", 0, 0.25)  # seed 1 never finished
    names = ["softmax_no_qk_encoder_self", "optimization_encoder_self", "pool_encoder_self"]
    argv = ["run", "--variants", *names, "--seeds", "0", "1", "--out", str(tmp_path / "t")]
    results = main([*argv, "--skip-runs", "--no-costs"])
    md = (tmp_path / "t.md").read_text()
    assert "| control | what differs from the control | Δ test mAP vs control [95 % CI] |" in md
    assert "| `optimization_encoder_self` | 2 | 0 | 0.180 ± 0.042 |" in md
    # Paired by seed: mean -0.07, half-width t(0.975, 1) · sd(Δ) / √2 = 12.706 · 0.0283 / 1.414.
    change = "encoder_self: softmax → optimization"
    assert f"| `softmax_no_qk_encoder_self` | {change} | -0.070 [-0.324, +0.184] (n=2) |" in md
    change = "encoder_self: softmax → pool"  # one shared seed: no interval
    assert f"| `softmax_no_qk_encoder_self` | {change} | +0.050 (n=1) |" in md
    assert "Δ vs control: the variant's test mAP minus its control's, paired by seed" in md
    # The control itself has no control among these runs (softmax did not run): cells "–".
    with (tmp_path / "t.csv").open() as f:
        rows = {r["variant"]: r for r in csv.DictReader(f)}
    assert rows["softmax_no_qk_encoder_self"]["control"] == ""
    assert rows["pool_encoder_self"]["Δ test mAP vs control [95 % CI]"] == "+0.050 (n=1)"
    # A control whose runs all crashed gives no difference, not a wrong one.
    crashed = [r for r in results if r.variant != "softmax_no_qk_encoder_self"]
    crashed.append(RunResult("softmax_no_qk_encoder_self", 0, None, "crashed"))
    got = comparisons(crashed)["optimization_encoder_self"]
    assert got == {
        "control": "`softmax_no_qk_encoder_self`",
        WHAT_DIFFERS: "encoder_self: softmax → optimization",
        DELTA_VS_CONTROL: None,
    }


def test_variants_are_required_by_run(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["run", "--out", str(tmp_path / "t")])
    assert exc.value.code == 2 and "required: --variants" in capsys.readouterr().err
    for subcommand in ("run", "sites"):  # a name without an overlay: a usage error too
        with pytest.raises(SystemExit) as exc:
            main([subcommand, "--variants", "nope", "--out", str(tmp_path / "t")])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"{subcommand}: no config for ['nope']" in err


def test_help_names_every_subcommand(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    out = capsys.readouterr().out
    assert exc.value.code == 0 and "run|sensitivity|ablation|sites|probe" in out
