"""A signal during a fit's validation lets that validation finish before the run stops, so the
run resumed from its last.ckpt has every validation the uninterrupted run has, with equal values."""

from __future__ import annotations

import logging
import os
import signal

import pytest
from lightning.pytorch.callbacks import Callback

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
