"""RunCheckpoint: its folder, a resume point from the first step, the best ranked on scores of its
own step, Ctrl-C and SIGTERM saving, whole-epoch averages after a resume, atomic writes."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torchmetrics import MeanMetric

from attn_lightning.callbacks import AtomicCheckpointIO, RunCheckpoint, is_partial
from attn_lightning.callbacks.resume import metric_states, restore_metric_states
from tests.runs import CONFIGS, train

# 64 examples in batches of 8: 8 steps an epoch.
TINY = [
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=16",
    "--data.init_args.batch_size=8",
    "--data.init_args.seq_len=8",
    "--model.init_args.generate_max_batches=1",
    "--trainer.log_every_n_steps=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--experiment=exp",
]


def _fit(tmp: Path, *extra: str):
    return train("fit", tmp, [CONFIGS / "reversal" / "base.yaml"], options=TINY, extra=extra)


def _folder(tmp: Path, run: str = "r") -> Path:
    return tmp / "checkpoints" / "exp" / run


def _step(path: Path) -> int:
    return int(torch.load(path, weights_only=True)["global_step"])


def _scalars(tmp: Path, run: str, tag: str) -> dict[int, float]:
    events = EventAccumulator(str(tmp / "logs" / "exp" / run))
    events.Reload()
    return {e.step: e.value for e in events.Scalars(tag)}


class SignalAtStep(Callback):
    """Sends this process ``signal`` at the end of step ``at`` (as Ctrl-C or a scheduler would)."""

    signal = signal.SIGINT
    at = 3

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.at:
            os.kill(os.getpid(), self.signal)


class TermAtStep(SignalAtStep):
    signal = signal.SIGTERM
    at = 6


class FailAtStep(Callback):
    """Raises at the end of step 5: a run that dies (no signal, nothing saved for it)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 5:
            raise RuntimeError("died at step 5")


pytestmark = pytest.mark.usefixtures("cli_workdir")


def test_last_checkpoint_from_the_first_step_save_before_any_validation(tmp_path):
    # No validation before step 8; Lightning 2.6 deferred every save until it (none at all).
    with pytest.raises(RuntimeError, match="died at step 5"):
        _fit(
            tmp_path,
            "--run_name=r",
            "--trainer.max_steps=20",
            "--trainer.val_check_interval=8",
            "--checkpoint.every_n_train_steps=2",
            f"--trainer.callbacks+={__name__}.FailAtStep",
        )
    assert _step(_folder(tmp_path) / "last.ckpt") == 4
    assert not list(_folder(tmp_path).glob("best*"))  # nothing measured, nothing ranked


@pytest.mark.parametrize(
    ("every", "interval", "first"),
    [("null", "4", 4), ("3", "4", 4), ("null", "null", 8)],
    ids=["by-validation", "by-step", "at-epoch-end"],  # 8 steps an epoch
)
def test_last_follows_every_validation_and_ends_at_the_final_step(tmp_path, every, interval, first):
    # mode=max on a falling val/loss: the best is the first validation's and never changes.
    # Lightning 2.6 then never wrote last.ckpt again; ours is written at every save point and
    # holds the final weights at the end, also off the validation and step grid (step 10).
    _fit(
        tmp_path,
        "--run_name=r",
        "--trainer.max_steps=10",
        f"--trainer.val_check_interval={interval}",
        "--trainer.check_val_every_n_epoch=1",
        "--checkpoint.mode=max",
        f"--checkpoint.every_n_train_steps={every}",
    )
    folder = _folder(tmp_path)
    assert sorted(p.name for p in folder.glob("best*")) == [f"best-step={first}.ckpt"]
    assert _step(folder / "last.ckpt") == 10


@pytest.fixture
def sigint_default():
    """SIGINT as an interactive Python has it, whatever this test process inherited.

    A suite started as a background job inherits SIGINT ignored (POSIX), which the callback keeps.
    """
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


@pytest.mark.usefixtures("sigint_default")
@pytest.mark.parametrize("callback", ["SignalAtStep", "TermAtStep"])
def test_ctrl_c_and_sigterm_finish_the_step_and_save_last(tmp_path, callback):
    with pytest.raises(SystemExit):
        _fit(
            tmp_path,
            "--run_name=r",
            "--trainer.max_steps=20",
            "--trainer.val_check_interval=8",
            f"--trainer.callbacks+={__name__}.{callback}",
        )
    at = {"SignalAtStep": 3, "TermAtStep": 6}[callback]
    assert _step(_folder(tmp_path) / "last.ckpt") == at
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler given back


def test_an_ignored_sigint_stays_ignored(tmp_path):
    # A run started in the background (SIGINT ignored) is not stopped by a Ctrl-C meant elsewhere.
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        _fit(
            tmp_path,
            "--run_name=r",
            "--trainer.max_steps=8",
            "--trainer.val_check_interval=8",
            f"--trainer.callbacks+={__name__}.SignalAtStep",
        )
        assert _step(_folder(tmp_path) / "last.ckpt") == 8  # ran to the end
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


def test_best_is_ranked_only_at_the_validations_that_measured_it(tmp_path):
    cli = _fit(
        tmp_path,
        "--run_name=r",
        "--trainer.max_steps=12",
        "--trainer.val_check_interval=4",
        "--checkpoint.every_n_train_steps=3",
        "--checkpoint.save_top_k=-1",
    )
    best = sorted(p.name for p in _folder(tmp_path).glob("best*"))
    assert best == ["best-step=12.ckpt", "best-step=4.ckpt", "best-step=8.ckpt"]
    measured = _scalars(tmp_path, "r", "val/loss")  # at Lightning's log step: global step - 1
    for path, score in cli.trainer.checkpoint_callback.best_k_models.items():
        assert float(score) == pytest.approx(measured[_step(Path(path)) - 1], abs=0, rel=1e-7)
    # last.ckpt of a save due on a validation step (12) holds the loop past that validation.
    assert _step(_folder(tmp_path) / "last.ckpt") == 12


def test_epoch_averages_and_best_after_a_mid_epoch_resume(tmp_path):
    common = (
        "--trainer.max_steps=16",
        "--trainer.val_check_interval=null",
        "--trainer.check_val_every_n_epoch=1",
        "--checkpoint.every_n_train_steps=2",
    )
    full = _fit(tmp_path, "--run_name=full", *common)
    with pytest.raises(SystemExit):  # SIGTERM after step 6 of epoch 0's 8
        _fit(tmp_path, "--run_name=cut", *common, f"--trainer.callbacks+={__name__}.TermAtStep")
    last = _folder(tmp_path, "cut") / "last.ckpt"
    resumed = _fit(tmp_path, "--run_name=cut", *common, f"--ckpt_path={last}")
    for tag in ("train/loss_epoch", "train/token_acc_epoch", "val/loss"):
        assert _scalars(tmp_path, "cut", tag) == _scalars(tmp_path, "full", tag), tag
    assert Path(resumed.trainer.checkpoint_callback.best_model_path).name == (
        Path(full.trainer.checkpoint_callback.best_model_path).name
    )


def test_metric_states_restore_the_epoch_sum_exactly():
    values = [torch.rand(5) for _ in range(4)]
    whole, before, after = MeanMetric(), MeanMetric(), MeanMetric()
    for v in values:
        whole(v)
    for v in values[:2]:
        before(v)
    saved = metric_states(torch.nn.ModuleDict({"m": before}), {"m"})
    for v in values[2:]:
        after(v)
        if v is values[2]:  # restored after the resumed run's first step
            restore_metric_states(torch.nn.ModuleDict({"m": after}), saved)
    assert torch.equal(after.compute(), whole.compute())


def test_atomic_writes_leave_the_old_file_or_the_new_one(tmp_path, monkeypatch):
    io, target = AtomicCheckpointIO(), tmp_path / "run" / "last.ckpt"
    io.save_checkpoint({"step": 1}, target)
    assert torch.load(target, weights_only=True) == {"step": 1}

    def cut_short(obj, file):
        file.write(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", cut_short)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": 2}, target)
    monkeypatch.undo()
    assert torch.load(target, weights_only=True) == {"step": 1}
    assert sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt"]  # no temp file
    assert is_partial(target.with_name(".last.ckpt.123.partial")) and not is_partial(target)


class _Strategy:
    checkpoint_io = TorchCheckpointIO()

    @staticmethod
    def broadcast(obj):
        return obj


class _Logger:
    def __init__(self, name):
        self.name = name


class _Trainer:
    def __init__(self, name, log_dir):
        self.loggers = [_Logger(name)]
        self.log_dir = log_dir
        self.strategy = _Strategy()
        self.is_global_zero = False


@pytest.mark.parametrize(
    ("name", "expected"), [("reversal", "reversal"), (None, "default"), ("", "default")]
)
def test_run_checkpoint_folder_follows_the_logger(tmp_path, name, expected):
    callback = RunCheckpoint(root=str(tmp_path))
    callback.setup(_Trainer(name, "logs/x/my-run"), None, "fit")
    assert callback.dirpath == str(tmp_path / expected / "my-run")
    explicit = RunCheckpoint(root=str(tmp_path), dirpath=str(tmp_path / "here"))
    explicit.setup(_Trainer(name, "logs/x/my-run"), None, "fit")
    assert explicit.dirpath == str(tmp_path / "here")


def test_run_checkpoint_without_a_log_dir_uses_run_not_none(tmp_path):
    trainer = _Trainer("exp", None)
    callback = RunCheckpoint(root=str(tmp_path))
    callback.setup(trainer, None, "fit")
    assert callback.dirpath == str(tmp_path / "exp" / "run")
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


@pytest.mark.parametrize("score", [float("nan"), float("inf"), float("-inf")])
def test_a_non_finite_score_never_becomes_the_best(score):
    # Lightning ranks a NaN as the worst score, yet keeps it while fewer than save_top_k are kept:
    # a diverged run's only validation became its "best" checkpoint.
    trainer = SimpleNamespace(global_step=5, is_global_zero=True)
    checkpoint = RunCheckpoint(monitor="val/loss", mode="min", save_top_k=1)
    assert not checkpoint.check_monitor_top_k(trainer, torch.tensor(score))
    assert checkpoint.check_monitor_top_k(trainer, torch.tensor(1.0))
    keep_all = RunCheckpoint(monitor="val/loss", mode="max", save_top_k=-1)
    assert not keep_all.check_monitor_top_k(trainer, torch.tensor(score))
