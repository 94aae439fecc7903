"""The warm-start study's plan and tables (the runs themselves: test_cli)."""

from __future__ import annotations

import pytest

from attn_lightning.records.files import read_csv
from lab.results.records import RunResult
from lab.studies.runner import Runner
from lab.studies.warm_start import tables
from lab.studies.warm_start.plan import BACKENDS, PERFORMERS, Plan


def test_the_plan_has_one_control_per_question_and_the_base_first():
    plan = Plan("reversal", base_steps=1500, finetune_steps=300, redraw_every=100, experiment="w")
    runs = plan.variants()
    assert runs[0].info == {"backend": "softmax", "condition": "base"}
    per_backend = {
        b: [v.info["condition"] for v in runs if v.info["backend"] == b] for b in BACKENDS
    }
    for backend, conditions in per_backend.items():
        expected = {"zero-shot", "fine-tune", "scratch", "scratch, base + fine-tune steps"}
        expected |= {"fine-tune + redraw"} if backend in PERFORMERS else set()
        assert set(conditions) == expected, backend
    by_name = {v.name: v for v in runs}
    tune, redraw = by_name["performer_m64@fine-tune"], by_name["performer_m64@fine-tune-redraw"]
    # fine-tune and its redraw control differ in the redraw only
    assert set(tune.overrides) ^ set(redraw.overrides) == {
        "feature_redraw.every_n_steps=0",
        "feature_redraw.every_n_steps=100",
    }
    # each seed starts from its own base: {seed} is filled per run
    args = Runner(experiment="w").train_args(tune, seed=3)
    assert "--init_from=checkpoints/w/softmax-s3/last.ckpt" in args
    assert by_name["linear@scratch-1800"].overrides[1] == "trainer.max_steps=1800"
    assert by_name["linear@zero-shot"].subcommand == "test"


def _run(backend, condition, seed, acc):
    run = RunResult(
        f"{backend}@{condition}", seed, 1.0, "ok", {"test/acc": acc, "test/loss": 1 - acc}
    )
    run.info.update(backend=backend, condition=condition)
    return run


def test_tables_pair_the_fine_tune_with_scratch_per_seed(tmp_path):
    runs = [_run("linear", "fine-tune", s, a) for s, a in enumerate([0.9, 0.92, 0.95])] + [
        _run("linear", "scratch", s, a) for s, a in enumerate([0.5, 0.6, 0.96])
    ]
    tables.write(tmp_path / "w", runs, task="digits", command="c")
    text = (tmp_path / "w.md").read_text()
    assert "| `linear` | fine-tune | 3 | 92.33 ± 2.52 |" in text
    assert "| `linear` | fine-tune − scratch | +23.67 [" in text
    assert "(n=3: 2+ 1− 0=, sign p 1.00)" in text
    assert "s0 +40.00, s1 +32.00, s2 -1.00" in (tmp_path / "w_paired.csv").read_text()


def test_a_task_with_a_threshold_shows_k_of_n_converged_and_median_iqr(tmp_path):
    runs = [_run("linear", "fine-tune", s, a) for s, a in enumerate([0.2, 0.995, 1.0])]
    for run in runs:  # reversal's metrics: converged = token accuracy >= 0.99
        run.metrics = {"test/token_acc": run.metrics["test/acc"]}
    tables.write(tmp_path / "w", runs, task="reversal", command="c")
    text = (tmp_path / "w.md").read_text()
    assert "# Warm start from softmax: reversal\n" in text
    assert "| backend | condition | converged |" in text
    assert "| `linear` | fine-tune | 2/3 | 99.50 [59.75, 99.75] | – | – |" in text
    assert "converged = " in text and "≥ 99" in text
    row = read_csv(tmp_path / "w.csv")[1][0]
    assert row["converged"] == "2"
    assert float(row["test/token_acc_mean"]) == pytest.approx(0.7317, abs=1e-4)
