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
  at the end of the current step and of its validation (``stopping.SignalStop``), where
  ``last.ckpt`` is written; a second Ctrl-C stops at once, unsaved (a step cut midway is no state
  to resume).
* **The run's folder is where its checkpoints are.** A run resumed from a checkpoint in its
  checkpoint folder, after that folder was moved or copied, keeps its last and best checkpoints
  there: the paths its state saved name the old folder, and Lightning would drop them (its next
  ``last.ckpt`` became ``last-v1.ckpt`` beside the one resumed from, and the summary named the
  old folder's best checkpoint).
* **Atomic writes** (``resume.AtomicCheckpointIO``).

The states of the task's torchmetrics metrics are saved too (``resume.metric_states``), so the
train-epoch averages of a run resumed mid-epoch cover the whole epoch.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, ClassVar

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch import Tensor
from torchmetrics import Metric

from attn_lightning.callbacks.resume import (
    AtomicCheckpointIO,
    is_partial,
    metric_states,
    restore_metric_states,
)
from attn_lightning.callbacks.stopping import SignalStop

log = logging.getLogger("attn_lightning")


class RunCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` that writes to ``<root>/<experiment>/<run>/`` (module docstring: when).

    ``experiment`` is the first logger's ``name`` and ``run`` the last part of its log dir (the
    logger's ``version``: ``version_N`` or the ``--run_name`` given), so logs and checkpoints of
    a run share their names. Both are broadcast from rank 0. An explicit ``dirpath`` wins. Without
    a logger the folder follows the same rule: ``experiment`` and ``run`` (``--experiment`` and
    ``--run_name``, set by the CLI; "default" and a new ``version_N`` when None). After a run
    stopped by a signal, ``stopped_by`` (and the class's ``last_stop``) says which ("Ctrl-C" or
    "SIGTERM").

    Args:
        root: top folder of all checkpoints.
        **kwargs: ``ModelCheckpoint`` arguments (monitor, save_last, save_top_k, ...).
    """

    last_stop: ClassVar[str | None] = None  # how the last run of this process was stopped

    def __init__(self, *, root: str = "checkpoints", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.root = root
        self.experiment: str | None = None  # the run's names where no logger gives them
        self.run: str | None = None
        self.stopped_by: str | None = None
        self._after_validation = False  # a step save waits for the validation of its step
        self._validation_keys: set[str] = set()  # the metrics validation logs
        self._keys_before: set[str] = set()
        self._pending_states: dict[str, Any] | None = None
        self._train_metrics: set[str] = set()  # the task's metrics training has updated
        self._signals = SignalStop()
        self._trainer: pl.Trainer | None = None

    # ------------------------------------------------------------------ folder and writer
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._own_folder = self.dirpath is None  # <root>/<experiment>/<run>: names its run
        self._trainer = trainer  # trainer.ckpt_path, when the state is loaded
        if self.dirpath is None and not trainer.loggers:
            self.dirpath = str(self._unlogged_folder(trainer))
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

    def _unlogged_folder(self, trainer: pl.Trainer) -> Path:
        """``<root>/<experiment>/<run>`` of a run without a logger: ``run`` or the next free
        ``version_N`` (chosen by rank 0, as a logger's version is)."""
        folder = Path(self.root) / (self.experiment or "default")
        run = self.run
        if run is None:
            taken = [p.name[8:] for p in folder.glob("version_*")] if folder.is_dir() else []
            numbers = [int(n) for n in taken if n.isdigit()]
            run = trainer.strategy.broadcast(f"version_{max(numbers, default=-1) + 1}")
        return folder / str(run)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if getattr(self, "_stage", "fit") != "fit":
            # validate/test/predict save nothing: no "dirpath has changed" warning for them.
            self.best_model_path = state_dict["best_model_path"]
            return
        trainer = self._trainer
        resumed = getattr(trainer, "ckpt_path", None) if trainer is not None else None
        saved = state_dict.get("dirpath")
        if (
            resumed
            and saved
            and self.dirpath
            and saved != self.dirpath
            and Path(str(resumed)).parent.resolve() == Path(self.dirpath).resolve()
        ):
            state_dict = relocated(state_dict, str(saved), str(self.dirpath))
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
        self._signals.start(trainer)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._signals.batch_started(trainer)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._signals.batch_ended()
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
        self._signals.validation_started(trainer)

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
        self._signals.validation_ended()  # a signal held back while validating arrives now
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
    def _save_resume_point(self, trainer: pl.Trainer) -> None:
        """``last.ckpt`` at this step if not written yet (a run stopping by signal)."""
        self.stopped_by = self.stopped_by or ("Ctrl-C" if self._signals.ctrl_c else "SIGTERM")
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
        self._signals.stop()

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
        self._signals.stop()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._signals.stop()
        self._trainer = None


def relocated(state: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """A ``ModelCheckpoint`` state whose checkpoint paths in folder ``old`` name folder ``new``.

    ``ModelCheckpoint.load_state_dict`` keeps only the best path when the folder changed: the next
    save then finds ``last.ckpt`` taken and writes ``last-v1.ckpt`` (so "resume from last.ckpt"
    goes back in time), and the run's best is a file of the old folder. A folder that moved
    holds the same files under the same names.
    """

    def moved(path: Any) -> Any:
        if isinstance(path, str) and path and Path(path).parent == Path(old):
            return str(Path(new) / Path(path).name)
        return path

    keys = ("best_model_path", "kth_best_model_path", "last_model_path")
    state = {**state, "dirpath": new, **{k: moved(state[k]) for k in keys if k in state}}
    if isinstance(state.get("best_k_models"), dict):
        state["best_k_models"] = {moved(k): v for k, v in state["best_k_models"].items()}
    return state


def _validation_follows(trainer: pl.Trainer) -> bool:
    """Whether validation runs right after the training batch that just ended (Lightning's own
    rule, ``_TrainingEpochLoop._should_check_val_fx``)."""
    loop = trainer.fit_loop
    fetcher = getattr(loop, "_data_fetcher", None)
    if fetcher is None:
        return False
    return bool(loop.epoch_loop._should_check_val_fx(fetcher))
