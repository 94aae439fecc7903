"""``train.py`` stopped by a real Ctrl-C or SIGTERM: it finishes the step, saves ``last.ckpt``, says
how to resume and exits 128 + the signal (not 0, as if it had finished)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

ROOT = Path(__file__).resolve().parents[2]


class WaitForSignal(Callback):
    """Test helper run inside train.py: at step 3, writes ``$SIGNAL_TEST_READY`` and waits for
    the signal the test sends (then lets the step end)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != 3:
            return
        Path(os.environ["SIGNAL_TEST_READY"]).touch()
        deadline = time.monotonic() + 120
        while not trainer.received_sigterm and time.monotonic() < deadline:
            time.sleep(0.05)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_saves_last_and_exits_with_its_code(tmp_path, signum):
    ready = tmp_path / "ready"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PL_", "LOCAL_RANK"))}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "SIGNAL_TEST_READY": str(ready)}
    cmd = [sys.executable, str(ROOT / "train.py"), "fit"]
    cmd += ["--config", str(ROOT / "configs" / "reversal" / "base.yaml")]
    cmd += ["--config", str(ROOT / "configs" / "presets" / "debug.yaml")]
    cmd += ["--trainer.max_steps=8", "--trainer.limit_train_batches=8", "--run_name=r"]
    cmd += ["--trainer.callbacks+=tests.cli.test_entry.WaitForSignal"]
    # SIGINT as a terminal's foreground job has it: a suite run in the background passes on
    # SIGINT ignored, which the run would (rightly) keep ignoring.
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_default_sigint,
    )
    try:
        deadline = time.monotonic() + 300
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.1)
        proc.send_signal(signum)
        err = proc.communicate(timeout=120)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
    last = tmp_path / "checkpoints" / "debug" / "r" / "last.ckpt"
    assert proc.returncode == 128 + signum, err[-3000:]
    assert torch.load(last, weights_only=True)["global_step"] == 3
    by = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
    resume = f"--ckpt_path {Path('checkpoints/debug/r/last.ckpt')}"
    assert f"stopped by {by} after step 3; resume with {resume}" in err
    assert "Traceback" not in err
