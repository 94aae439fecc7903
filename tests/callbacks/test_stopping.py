"""How a fit stops. A signal during a fit's validation lets that validation finish before the run
stops, so the run resumed from its last.ckpt has every validation the uninterrupted run has, with
equal values; NonFiniteStop: a run whose loss or gradient stops being finite ends after a few such
steps with one line and a non-zero exit, its last.ckpt holding the last finite weights, no NaN
"best"."""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from attn_lightning.attention.base import CHECK_FINITE_ENV, check_finite
from attn_lightning.callbacks import NonFiniteStop
from attn_lightning.cli import command_line
from tests.callbacks.test_checkpoints import _fit, _folder, _scalars, _step

pytestmark = pytest.mark.usefixtures("cli_workdir")
# 8 steps an epoch, a validation of 2 batches every 4 steps.
COMMON = (
    "--trainer.max_steps=12",
    "--trainer.val_check_interval=4",
    "--trainer.check_val_every_n_epoch=null",
    "--trainer.limit_val_batches=2",
)


class SignalInValidation(Callback):
    """Sends ``$STOP_TEST_SIGNAL`` to this process after the first batch of step 8's validation
    (of the first session: nothing is sent in a resumed run)."""

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, *rest):
        if trainer.global_step == 8 and batch_idx == 0 and trainer.ckpt_path is None:
            os.kill(os.getpid(), getattr(signal, os.environ["STOP_TEST_SIGNAL"]))


class SignalBeforeValidation(Callback):
    """Sets the stop flag (as a signal does) during step 8, which a validation follows."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 8 and trainer.ckpt_path is None:
            trainer._signal_connector.received_sigterm = True


@pytest.fixture
def sigint_default():
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("sigint_default")
@pytest.mark.parametrize(
    ("callback", "sent"),
    [
        ("SignalInValidation", "SIGTERM"),
        ("SignalInValidation", "SIGINT"),
        ("SignalBeforeValidation", "SIGTERM"),
    ],
    ids=["sigterm-in-validation", "ctrl-c-in-validation", "stop-before-validation"],
)
def test_the_validation_a_signal_interrupts_is_logged(
    tmp_path, monkeypatch, caplog, callback, sent
):
    monkeypatch.setenv("STOP_TEST_SIGNAL", sent)
    _fit(tmp_path, "--run_name=full", *COMMON)
    with caplog.at_level(logging.INFO, logger="attn_lightning"), pytest.raises(SystemExit):
        _fit(tmp_path, "--run_name=cut", *COMMON, f"--trainer.callbacks+={__name__}.{callback}")
    last = _folder(tmp_path, "cut") / "last.ckpt"
    assert _step(last) == 8
    if sent == "SIGINT":  # the step it stops after (it said 9 while step 8 validated)
        assert "Ctrl-C: stopping after step 8 and its validation" in caplog.text
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handlers given back
    _fit(tmp_path, "--run_name=cut", *COMMON, f"--ckpt_path={last}")
    full, cut = _scalars(tmp_path, "full", "val/loss"), _scalars(tmp_path, "cut", "val/loss")
    assert sorted(cut) == sorted(full) == [3, 7, 11], (sorted(full), sorted(cut))
    assert cut[7] == full[7]  # the whole validation, not its first batch
    assert cut[11] == full[11]


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
        [*healthy, "--trainer.callbacks+=tests.callbacks.test_stopping.NanGradientAtStep2"]
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
