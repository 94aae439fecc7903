"""A plan's ``select:``: the tuning seeds run the whole grid, the others only each group's cell
chosen on validation; the same choice from the records alone (--report-only), the dry run's
first round, and refusals that name the value."""

from __future__ import annotations

import logging
import re

import pytest

from lab.results.records import RunResult
from lab.studies.runner import Variant
from lab.studies.select import Select, check_select, chosen
from lab.studies.sweep import main
from tests.lab.studies.test_sweep import FAKE_RECORD

# val/acc peaks at lr 0.01 for linear and at 0.1 for softmax; test/acc would pick otherwise.
FAKE = (
    FAKE_RECORD
    + """
name = json.loads(args["model.init_args.attention"])["name"]
lr = float(args["model.init_args.lr"])
best = {"linear": 0.01, "softmax": 0.1}[name]
val = 1.0 - abs(lr - best) - 0.001 * int(args["seed_everything"])
write_record({"fit": {"val/acc": val}, "test": {"test/acc": 1.0 - val}}, 1)
"""
)

PLAN = """
config: [base.yaml]
backends: [linear, softmax]
seeds: [0, 1, 2]
metrics: [test/acc, val/acc]
grid:
  model.init_args.lr: [0.001, 0.01, 0.1]
select: {keys: [model.init_args.lr], metric: val/acc, seeds: [0]}
"""


def _argv(tmp_path, plan: str = PLAN) -> list[str]:
    (tmp_path / "plan.yaml").write_text(plan)
    (tmp_path / "fake.py").write_text(FAKE)
    return ["--plan", "plan.yaml", "--out", "res/page", "--train-script", "fake.py"]


def test_other_seeds_run_only_at_the_cell_chosen_on_validation(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    runs = main(_argv(tmp_path))
    ran = [(r.variant, r.seed) for r in runs]
    assert ran[:6] == [
        (f"{b},lr={lr}", 0) for b in ("linear", "softmax") for lr in (0.001, 0.01, 0.1)
    ]
    assert ran[6:] == [("linear,lr=0.01", 1), ("linear,lr=0.01", 2), ("softmax,lr=0.1", 1),
                       ("softmax,lr=0.1", 2)]  # fmt: skip
    assert all(r.status == "ok" for r in runs)
    # The records alone give the same runs: the page rebuilds without training.
    again = main([*_argv(tmp_path), "--report-only"])
    assert [(r.variant, r.seed, r.status) for r in again] == [(*job, "ok") for job in ran]
    # The dry run shows the first round; the rest wait for its records.
    caplog.clear()
    caplog.set_level(logging.INFO)
    main([*_argv(tmp_path), "--dry-run", "--out", "res/other"])
    shown = re.findall(r"\| seed (\d) \| from", caplog.text)
    assert shown == ["0"] * 6
    # Where the records are, it takes them (and they choose): nothing is left to train.
    caplog.clear()
    main([*_argv(tmp_path), "--dry-run"])
    assert re.findall(r"\| seed \d \| from", caplog.text) == []
    taken = re.findall(r"\| (\S+) \| seed (\d) \| taken from res/page/runs/", caplog.text)
    assert taken == [(v, str(s)) for v, s in ran]


def _run(name: str, seed: int, val: float | None) -> RunResult:
    return RunResult(name, seed, 1.0, "ok", {} if val is None else {"val/acc": val})


def test_chosen_per_group_ties_take_the_first_and_min_flips():
    grid = [Variant(f"a,lr={lr}", overrides=("x=1", f"model.lr={lr}")) for lr in (1, 2, 3)]
    other = [Variant(f"b,lr={lr}", overrides=("x=2", f"model.lr={lr}")) for lr in (1, 2)]
    runs = [_run("a,lr=1", 0, 0.5), _run("a,lr=2", 0, 0.5), _run("a,lr=3", 0, 0.1),
            _run("a,lr=3", 1, 0.9),  # not a tuning seed: ignored
            _run("b,lr=1", 0, None), _run("b,lr=2", 0, 0.2)]  # fmt: skip
    select = Select(("model.lr",), "val/acc", (0,))
    assert [v.name for v in chosen([*grid, *other], runs, select)] == ["a,lr=1", "b,lr=2"]
    low = Select(("model.lr",), "val/acc", (0,), "min")
    assert [v.name for v in chosen(grid, runs, low)] == ["a,lr=3"]
    assert chosen(other, [], select) == []  # nothing run yet: no other seed runs


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"keys": ["model.width"], "metric": "val/acc"}, "keys ['model.width']: give a list of"),
        ({"keys": ["model.lr"], "metric": "test/acc"}, "metric 'test/acc': give a validation"),
        ({"keys": ["model.lr"], "metric": "val/acc", "seeds": [7]}, "seeds [7]: give a list of"),
        ({"keys": ["model.lr"], "metric": "val/acc", "direction": "up"}, "direction 'up'"),
        ({"keys": ["model.lr"]}, "select: give {keys"),
    ],
)
def test_refusals_name_the_value(spec, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_select(spec, ["model.lr"], [0, 1])


def test_a_plan_with_a_bad_select_fails_before_any_run(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(_argv(tmp_path, PLAN.replace("seeds: [0]}", "seeds: [5]}")))
    assert "plan plan.yaml: select: seeds [5]" in capsys.readouterr().err
    assert not (tmp_path / "res").exists()
