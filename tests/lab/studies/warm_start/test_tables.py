"""The warm-start study: its plans' stages (configs/studies/warm_start_*.yaml) and its report's
errors; its tables and the runs CSVs' order are its committed pages, rebuilt byte for byte from
the records (tests/docs/test_plan_pages)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attn_lightning.records.run_files import write_record
from lab.studies.runner import Runner
from lab.studies.sweep import parse
from lab.studies.warm_start import tables

ROOT = Path(__file__).resolve().parents[4]
PLAN = "configs/studies/warm_start_reversal.yaml"


def test_the_plan_has_one_control_per_question_and_the_base_first(monkeypatch):
    monkeypatch.chdir(ROOT)
    _, stages, _ = parse(["--plan", PLAN])
    by_name = {stage.name: stage for stage in stages}
    assert stages[0].name == "base" and [v.name for v in stages[0].variants] == ["softmax"]
    backends = list(tables.BACKENDS)
    assert {s.name: [v.name for v in s.variants] for s in stages[1:]} == {
        "zero_shot": backends,
        "fine_tune": backends,
        "fine_tune_redraw": backends[:2],  # the Performers
        "scratch": backends,
        "scratch_total": backends,
    }
    assert list(by_name) == list(tables.CONDITIONS)  # every stage is a condition of the tables
    tune, redraw = by_name["fine_tune"], by_name["fine_tune_redraw"]
    # fine-tune and its redraw control differ in the redraw only
    assert set(tune.overrides) ^ set(redraw.overrides) == {
        "feature_redraw.every_n_steps=0",
        "feature_redraw.every_n_steps=100",
    }
    assert tune.variants[0].overrides == redraw.variants[0].overrides
    # each seed starts from its own base: {seed} is filled per run
    runner = Runner(overrides=tune.overrides, experiment="w")
    args = runner.train_args(tune.variants[2], seed=3)
    assert "--init_from=checkpoints/warm-start-reversal-base/softmax-s3/last.ckpt" in args
    assert args[-1] == "--feature_redraw.every_n_steps=0" and "--trainer.max_steps=200" in args
    total = by_name["scratch_total"]
    assert "--trainer.max_steps=800" in Runner(overrides=total.overrides).train_args(
        total.variants[0], 0
    )
    zero = by_name["zero_shot"].variants[0]
    assert zero.subcommand == "test"
    swap = json.dumps({"name": "performer", "num_features": 64})
    assert f"model.init_args.attention_override={swap}" in zero.overrides


def _records(root: Path, runs: list[tuple[str, str, int, dict]]) -> Path:
    for stage, variant, seed, metrics in runs:
        folder = root / stage / f"{variant}-s{seed}"
        folder.mkdir(parents=True)
        tags = {"study": "w", "stage": stage, "variant": variant, "seed": seed}
        record = {"seed": seed, "status": "ok", "tags": tags, "fit_seconds": 1.0}
        write_record(folder, {**record, "metrics": {"test": metrics}})
    return root


@pytest.mark.parametrize(
    ("runs", "task", "error", "message"),
    [
        (
            [("tune", "linear", 0, {})],
            "digits",
            ValueError,
            "stage 'tune', backend 'linear'; the stages are ['base', ",
        ),
        ([("base", "gru", 0, {})], "digits", ValueError, "backend 'gru'; the stages are"),
        (
            [("base", "softmax", 0, {})],
            "vision",
            ValueError,
            "task 'vision'; the tasks are ['reversal', 'digits']",
        ),
        ([], "digits", FileNotFoundError, "no run records under "),
    ],
)
def test_a_run_or_task_the_study_does_not_have_is_an_error_naming_it(
    tmp_path, runs, task, error, message
):
    root = _records(tmp_path / "r", runs)
    with pytest.raises(error) as raised:
        tables.write([root], tmp_path / "w", task=task, command="c")
    assert message in str(raised.value)
