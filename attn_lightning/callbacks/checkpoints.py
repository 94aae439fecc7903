"""Run checkpoints: where they go, when they are written, how the best is chosen, how a run stops.

``RunCheckpoint`` is Lightning's ``ModelCheckpoint`` with four rules a resumable run needs:

* **A resume point from the first step.** With ``every_n_train_steps`` N, ``last.ckpt`` is
  written every N steps from step N on, whether or not the monitor (``val/loss``) exists yet;
  Lightning 2.6 defers every step save until the first validation, so a run stopped before it
  had nothing to resume from.
* **Ranked only on a score measured at that step.** Validation metrics are measured where
  validation runs; a step save in between would be ranked on the previous validation's score.
  So a validation metric ranks the top-k at each validation, and a step save only writes
  ``last.ckpt`` (a training metric, logged each step, still ranks at the step saves). A step
  save due on a step that validation follows is written after that validation: the checkpoint
  then holds the loop past it, and a resumed run neither repeats nor skips it (Lightning skips
  the validation of a step it resumes from at the step's end). Interrupted and uninterrupted runs
  therefore rank the same checkpoints on the same scores and keep the same best. A NaN or
  infinite score is never ranked: a diverged run has no "best" checkpoint.
* **Ctrl-C and SIGTERM finish the step and save.** The first Ctrl-C (or a SIGTERM) stops the run
  at the end of the current step (and its validation), where ``last.ckpt`` is written; a second
  Ctrl-C stops at once, unsaved (a step cut midway is no state to resume).
* **Atomic writes** (``AtomicCheckpointIO``): a checkpoint is written to a temporary file beside
  its target, flushed to the disk and renamed over it, so a kill leaves either the old file or
  the new one, never a truncated one; a write that fails removes its temporary file.

The states of the task's torchmetrics metrics are saved too (``metric_states``), so the
train-epoch averages of a run resumed mid-epoch cover the whole epoch.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor, nn
from torchmetrics import Metric

log = logging.getLogger("attn_lightning")

PARTIAL = ".partial"  # a checkpoint being written: ``.<name>.<pid>.partial`` beside it


def is_partial(path: Path) -> bool:
    """Whether ``path`` is the temporary file of a checkpoint write (finished or cut short)."""
    return path.name.startswith(".") and path.name.endswith(PARTIAL)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes beside the target, fsyncs and renames over it.

    Lightning's own write goes through a temporary file in ``$TMPDIR`` and moves it into place:
    with checkpoints on another filesystem (a node-local TMPDIR, shared storage) the move is a
    copy, which a kill cuts short, leaving a truncated ``last.ckpt`` and the temporary file
    behind. A rename within one directory is atomic. Remote paths (``s3://``) keep Lightning's
    write.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}{PARTIAL}")
        try:
            with open(partial, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    # The rename itself reaches the disk only when the folder's entry does (POSIX).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders (Windows): the rename is all we have
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class RunCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that writes to ``<root>/<experiment>/<run>/`` (module docstring: when).

    ``experiment`` is the first logger's ``name`` and ``run`` the last part of its log dir (the
    logger's ``version``: ``version_N`` or the ``--run_name`` given), so logs and checkpoints of
    a run share their names. Both are broadcast from rank 0. An explicit ``dirpath`` wins; with no
    logger it falls back to ``<root>/default/run``. After a run stopped by a signal, ``stopped_by``
    (and the class's ``last_stop``) says which ("Ctrl-C" or "SIGTERM").

    Args:
        root: top folder of all checkpoints.
        **kwargs: ``ModelCheckpoint`` arguments (monitor, save_last, save_top_k, ...).
    """

    last_stop: ClassVar[str | None] = None  # how the last run of this process was stopped

    def __init__(self, *, root: str = "checkpoints", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = root
        self.stopped_by: str | None = None
        self._after_validation = False  # a step save waits for the validation of its step
        self._validation_keys: set[str] = set()  # the metrics validation logs
        self._keys_before: set[str] = set()
        self._pending_states: dict[str, Any] | None = None
        self._train_metrics: set[str] = set()  # the task's metrics training has updated
        self._sigint: Any = None  # the SIGINT handler ours replaced while training
        self._trainer: pl.Trainer | None = None

    # ------------------------------------------------------------------ folder and writer
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._own_folder = self.dirpath is None  # <root>/<experiment>/<run>: names its run
        if self.dirpath is None:
            experiment, run = "default", "run"
            if trainer.loggers:
                log_dir = trainer.log_dir  # broadcast from rank 0 by the trainer
                # A logger may have no name (TensorBoardLogger(name=None)) or no log dir
                # (save_dir=None): keep "default" / "run" rather than a folder named "None".
                experiment = str(trainer.strategy.broadcast(trainer.loggers[0].name) or experiment)
                if log_dir:
                    run = Path(log_dir).name
            self.dirpath = str(Path(self.root) / experiment / run)
        self._stage = stage
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:  # not a user's own
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        if stage == "fit" and trainer.is_global_zero and Path(self.dirpath).is_dir():
            for path in Path(self.dirpath).iterdir():
                if is_partial(path):  # left by a write that was killed
                    path.unlink(missing_ok=True)
        super().setup(trainer, pl_module, stage)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if getattr(self, "_stage", "fit") != "fit":
            # validate/test/predict save nothing: no "dirpath has changed" warning for them.
            self.best_model_path = state_dict["best_model_path"]
            return
        super().load_state_dict(state_dict)

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint["metric_states"] = {
            "epoch": trainer.current_epoch,
            "states": metric_states(pl_module, self._train_metrics),
        }

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._pending_states = checkpoint.get("metric_states")

    # ------------------------------------------------------------------ when to save
    @property
    def _by_step(self) -> bool:
        return self._every_n_train_steps >= 1

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        self.stopped_by = None
        type(self).last_stop = None
        self._trainer = trainer
        # An ignored SIGINT stays ignored: a shell starts background jobs so (POSIX), and a Ctrl-C
        # typed at that terminal is meant for the foreground job, not for this run.
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        ):
            self._sigint = signal.signal(signal.SIGINT, self._on_ctrl_c)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._pending_states is not None:  # the task's metrics exist once a step has run
            if self._pending_states.get("epoch") == trainer.current_epoch:
                restore_metric_states(pl_module, self._pending_states.get("states", {}))
            self._pending_states = None
        modules = pl_module.named_modules()
        self._train_metrics = {n for n, m in modules if isinstance(m, Metric) and m.update_count}
        validation_follows = _validation_follows(trainer)
        if not self._by_step:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        elif (
            trainer.global_step % self._every_n_train_steps == 0
            and not self._should_skip_saving_checkpoint(trainer)
        ):
            if validation_follows:
                self._after_validation = True
            else:
                candidates = self._monitor_candidates(trainer)
                if self.monitor is None or (
                    self.monitor in candidates and self.monitor not in self._validation_keys
                ):
                    self._save_topk_checkpoint(trainer, candidates)  # measured at this step
                self._save_last_checkpoint(trainer, candidates)
        if trainer.received_sigterm and not validation_follows:
            self._save_resume_point(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._keys_before = set(trainer.callback_metrics)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._validation_keys |= set(trainer.callback_metrics) - self._keys_before
        if not self._by_step:
            super().on_validation_end(trainer, pl_module)
            if not self._should_save_on_train_epoch_end(trainer):  # else: there, after the top-k
                self._save_last_if_not_saved(trainer)
        elif not self._should_skip_saving_checkpoint(trainer):
            candidates = self._monitor_candidates(trainer)
            if self.monitor is not None or self._after_validation:
                self._save_topk_checkpoint(trainer, candidates)  # on the score just measured
            if self._after_validation or self._last_global_step_saved == trainer.global_step:
                self._save_last_checkpoint(trainer, candidates)
        self._after_validation = False
        if trainer.received_sigterm:
            self._save_resume_point(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._by_step:  # step saves happen at batch or validation end, never here
            super().on_train_epoch_end(trainer, pl_module)
            if self._should_save_on_train_epoch_end(trainer):
                self._save_last_if_not_saved(trainer)

    def _save_last_if_not_saved(self, trainer: pl.Trainer) -> None:
        # Lightning 2.6 writes last.ckpt only when the top-k saved at this step, so after the
        # monitor's last improvement "last" stopped moving (a 10,000-step run's last.ckpt held
        # step 2,500): the resume point and the final weights follow every save point instead.
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    # ------------------------------------------------------------------ ranking
    def check_monitor_top_k(self, trainer: pl.Trainer, current: Tensor | None = None) -> bool:
        # Lightning (2.6) ranks NaN as the worst score, yet keeps it while fewer than save_top_k
        # checkpoints are kept: a run that diverged before its first validation got a "best".
        if current is not None and not bool(torch.isfinite(current).all()):
            if trainer.is_global_zero:
                log.warning(
                    "%s is %s at step %d: not ranked for the best checkpoint",
                    self.monitor,
                    float(current),
                    trainer.global_step,
                )
            return False
        return super().check_monitor_top_k(trainer, current)

    # ------------------------------------------------------------------ stopping
    def _on_ctrl_c(self, signum: int, frame: Any) -> None:
        trainer = self._trainer
        signal.signal(signal.SIGINT, self._sigint or signal.default_int_handler)
        if trainer is None or not hasattr(trainer, "_signal_connector"):
            raise KeyboardInterrupt
        self.stopped_by = "Ctrl-C"
        # Lightning's SIGTERM path: the loop stops at the end of this step (after its validation)
        # on every DDP rank, and raises SIGTERMException.
        trainer._signal_connector.received_sigterm = True
        if trainer.is_global_zero:
            log.info(
                "Ctrl-C: stopping after step %d and saving last.ckpt (Ctrl-C again to stop now, "
                "unsaved)",
                trainer.global_step + 1,
            )

    def _save_resume_point(self, trainer: pl.Trainer) -> None:
        """``last.ckpt`` at this step if not written yet (a run stopping by signal)."""
        self.stopped_by = self.stopped_by or "SIGTERM"
        if trainer.global_step > 0 and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        # The signal came after this step's last hook: the state is still a step's end. A bare
        # KeyboardInterrupt or an error may have cut a step midway, so nothing is saved for it.
        if isinstance(exception, SIGTERMException):
            self._save_resume_point(trainer)
            type(self).last_stop = self.stopped_by
            if trainer.is_global_zero:
                saved = self.last_model_path and self._last_global_step_saved == trainer.global_step
                log.info(
                    "stopped by %s after step %d; %s",
                    self.stopped_by,
                    trainer.global_step,
                    f"resume with --ckpt_path {self.last_model_path}{self._run_name(trainer)}"
                    if saved
                    else "no checkpoint saved (save_last off or no step done)",
                )
        super().on_exception(trainer, pl_module, exception)
        self._restore_sigint()

    def _run_name(self, trainer: pl.Trainer) -> str:
        """`` --run_name <run>`` where the resume hint needs it to continue this run's logs: a
        checkpoint in ``<root>/<experiment>/<run>/`` names its run (``cli.run_folders``), one in
        an explicit ``dirpath`` does not."""
        if getattr(self, "_own_folder", True) or not trainer.loggers or not trainer.log_dir:
            return ""
        return f" --run_name {Path(trainer.log_dir).name}"

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        # The final weights, where the last step was no save point (max_steps off the
        # validation and step grid): last.ckpt is the run's end.
        self._save_last_if_not_saved(trainer)
        self._restore_sigint()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore_sigint()
        self._trainer = None

    def _restore_sigint(self) -> None:
        if self._sigint is not None and threading.current_thread() is threading.main_thread():
            if signal.getsignal(signal.SIGINT) == self._on_ctrl_c:
                signal.signal(signal.SIGINT, self._sigint)
            self._sigint = None


def metric_states(module: nn.Module, names: set[str]) -> dict[str, dict[str, Any]]:
    """The accumulated states of the torchmetrics metrics ``names`` of ``module`` (on the CPU).

    A metric logged ``on_epoch`` keeps its running sums itself, outside Lightning's checkpoint;
    saved here, a run resumed mid-epoch ends the epoch with the same average as one that was not
    stopped.
    """
    states: dict[str, dict[str, Any]] = {}
    for name, metric in module.named_modules():
        if name in names and isinstance(metric, Metric):
            state = {key: getattr(metric, key) for key in metric._defaults}
            states[name] = {
                key: [t.detach().cpu() for t in v] if isinstance(v, list) else v.detach().cpu()
                for key, v in state.items()
            }
    return states


def restore_metric_states(module: nn.Module, states: dict[str, dict[str, Any]]) -> None:
    """Add saved ``metric_states`` into the metrics of ``module`` that exist now.

    Called after the first step of a resumed run: a metric the task creates when first logged
    exists by then, and holds that step's value, to which the saved sums are added (in the order
    the uninterrupted run adds them: saved, then this step).
    """
    for name, metric in module.named_modules():
        saved = states.get(name)
        if saved is None or not isinstance(metric, Metric):
            continue
        device = metric.device
        incoming = {
            k: [t.to(device) for t in v] if isinstance(v, list) else v.to(device)
            for k, v in saved.items()
        }
        try:
            metric.merge_state(incoming)
        except (RuntimeError, ValueError) as error:  # a metric that cannot merge states
            log.warning("metric %s starts the resumed epoch afresh: %s", name, error)


def _validation_follows(trainer: pl.Trainer) -> bool:
    """Whether validation runs right after the training batch that just ended (Lightning's own
    rule, ``_TrainingEpochLoop._should_check_val_fx``)."""
    loop = trainer.fit_loop
    fetcher = getattr(loop, "_data_fetcher", None)
    if fetcher is None:
        return False
    return bool(loop.epoch_loop._should_check_val_fx(fetcher))
