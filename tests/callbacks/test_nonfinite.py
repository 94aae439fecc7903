"""NonFiniteStop: a run whose loss or gradient stops being finite ends after a few such steps with
one line and a non-zero exit, its last.ckpt holding the last finite weights, no NaN "best"."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from attn_lightning.attention.base import CHECK_FINITE_ENV, check_finite
from attn_lightning.callbacks import NonFiniteStop
from attn_lightning.cli import command_line

ROOT = Path(__file__).resolve().parents[2]
# lr 1e6 (warmed up from 1e4): the loss is ~1e11 at step 1 and NaN from step 2 on.
DIVERGING = [
    "fit",
    "--config",
    str(ROOT / "configs" / "reversal" / "base.yaml"),
    "--config",
    str(ROOT / "configs" / "presets" / "debug.yaml"),
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=16",
    "--data.init_args.batch_size=8",
    "--data.init_args.seq_len=8",
    "--model.init_args.lr=1e6",
    "--trainer.max_steps=8",
    "--trainer.limit_train_batches=8",
    "--trainer.enable_progress_bar=false",
    "--run_name=r",
]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    monkeypatch.delenv("ATTN_LIGHTNING_DEBUG", raising=False)
    monkeypatch.delenv(CHECK_FINITE_ENV, raising=False)
    # An earlier test's --debug leaves the process-wide input check on: the NaN steps would stop
    # in the attention layer's own check.
    with check_finite(False):
        yield


def _finite(path: Path) -> bool:
    state = torch.load(path, weights_only=True)["state_dict"]
    return all(bool(t.isfinite().all()) for t in state.values() if t.is_floating_point())


def test_a_diverging_run_stops_in_one_line_and_keeps_finite_weights(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        command_line(DIVERGING)
    assert exit_info.value.code == 3
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    line = lines[0]
    assert "3 steps in a row" in line and "at step 1: loss " in line
    for hint in ("--model.init_args.lr", "--trainer.precision", "--debug"):
        assert hint in line
    assert "ATTN_LIGHTNING_CHECK_FINITE=1" in line
    folder = tmp_path / "checkpoints" / "debug" / "r"
    assert "the last finite weights are in checkpoints/debug/r/last.ckpt" in line
    last = torch.load(folder / "last.ckpt", weights_only=True)
    assert last["global_step"] == 4 and _finite(folder / "last.ckpt")
    assert not list(folder.glob("best-*"))


def test_only_rank_zero_says_why(monkeypatch, capsys):
    # Under DDP every rank stops together: one line, not one per process.
    monkeypatch.setattr("attn_lightning.cli.entry._rank_zero", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        command_line(DIVERGING)
    assert exit_info.value.code == 3 and "error:" not in capsys.readouterr().err


def test_patience_zero_trains_on_and_a_nan_score_is_no_best(tmp_path):
    command_line([*DIVERGING, "--nonfinite_stop.patience=0"])
    folder = tmp_path / "checkpoints" / "debug" / "r"
    assert (folder / "last.ckpt").is_file()
    assert not list(folder.glob("best-*"))  # val/loss was NaN at the only validation


class NanGradientAtStep2(Callback):
    """Test helper: one NaN gradient entry at step 2 only (an overflow in one backward pass)."""

    def on_after_backward(self, trainer, pl_module):
        if trainer.global_step == 2:
            next(pl_module.parameters()).grad.view(-1)[0] = float("nan")


def test_one_non_finite_step_is_skipped_and_training_goes_on(tmp_path):
    # Without the skip, the clipped NaN gradient makes every weight NaN and the run stops.
    healthy = [a for a in DIVERGING if not a.startswith("--model.init_args.lr")]
    command_line(
        [*healthy, "--trainer.callbacks+=tests.callbacks.test_nonfinite.NanGradientAtStep2"]
    )
    last = tmp_path / "checkpoints" / "debug" / "r" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 8 and _finite(last)


def _stub_trainer(scaler: object | None) -> SimpleNamespace:
    return SimpleNamespace(
        global_step=0,
        precision_plugin=SimpleNamespace(scaler=scaler),
        strategy=SimpleNamespace(reduce_boolean_decision=lambda decision, all: decision),
    )


def test_under_a_gradient_scaler_only_the_loss_counts():
    # fp16's GradScaler skips steps with inf gradients itself (and overflows while it calibrates):
    # those are not ours to skip or count; a non-finite loss still is.
    param = torch.nn.Parameter(torch.ones(2))
    optimizer = SimpleNamespace(param_groups=[{"params": [param]}])
    stop = NonFiniteStop()
    for scaler, loss, kept in (
        (object(), 1.0, True),
        (None, 1.0, False),
        (object(), math.nan, False),
    ):
        trainer = _stub_trainer(scaler)
        param.grad = torch.tensor([math.inf, 0.0])
        stop.on_train_start(trainer, None)
        stop.on_before_backward(trainer, None, torch.tensor(loss))
        stop.on_before_optimizer_step(trainer, None, optimizer)
        assert (param.grad is not None) == kept
