"""What a run shows while it trains and when it ends.

Runs here are budgeted in steps (``max_steps``) over an endless sampler, so Lightning's per-epoch
bar reads ``Epoch 0/-2 … v_num: 0.000``: ``StepProgressBar`` counts optimiser steps against the
budget instead. With stderr not a terminal (a job log, ``> file``) a bar is noise, and silence is
worse: ``PlainProgress`` writes one line every ``every_n_steps``. Both print one line per
validation during a fit (``validation_line``); the bar writes it above itself, where a logged
line would be drawn over. ``summary_lines`` is what every subcommand ends with: where the
checkpoints and logs went and the final metrics.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import (
    Callback,
    ModelSummary,
    ProgressBar,
    RichModelSummary,
    RichProgressBar,
    TQDMProgressBar,
)
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.model_summary import get_human_readable_count

from attn_lightning.callbacks.run_record import scalars

log = logging.getLogger("attn_lightning")


class StepProgressBar(TQDMProgressBar):
    """One training bar over the step budget (``global_step / max_steps``) for step-budgeted
    runs; epoch-budgeted runs keep Lightning's per-epoch bar. No ``v_num`` in the postfix."""

    def _step_budget(self, trainer: pl.Trainer) -> bool:
        return trainer.max_steps is not None and trainer.max_steps > 0

    def on_train_epoch_start(self, trainer: pl.Trainer, *args: Any) -> None:
        if not self._step_budget(trainer):
            super().on_train_epoch_start(trainer, *args)
            return
        bar = self.train_progress_bar
        if bar.total != trainer.max_steps:  # first epoch: one bar for the whole budget
            bar.reset(total=trainer.max_steps)
            bar.n = bar.initial = trainer.global_step  # a resumed run starts where it stopped
            bar.set_description("train (steps)")
            bar.refresh()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not self._step_budget(trainer):
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
            return
        bar = self.train_progress_bar
        if self._should_update(trainer.global_step, bar.total):
            bar.n = trainer.global_step
            bar.set_postfix(self.get_metrics(trainer, pl_module))
            bar.refresh()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._step_budget(trainer):
            super().on_train_epoch_end(trainer, pl_module)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_validation_end(trainer, pl_module)  # closes the validation bar
        line = validation_line(trainer)
        if line is not None and self._train_progress_bar is not None:
            # Above the training bar (tqdm clears and redraws it): a line logged to stderr
            # meanwhile would be overdrawn by the bar's next refresh.
            self.train_progress_bar.write(line)

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


class PlainProgress(Callback):
    """A log line every ``every_n_steps`` optimiser steps, and one per validation:
    ``step 300/1500 (20%) · 11.2 steps/s · eta 1m47s · train/loss 0.8123``."""

    def __init__(self, *, every_n_steps: int = 50) -> None:
        self.every_n_steps = max(1, every_n_steps)
        self._start: tuple[float, int] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._start = (time.perf_counter(), trainer.global_step)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        step = trainer.global_step
        if not trainer.is_global_zero or step % self.every_n_steps or self._start is None:
            return
        began, first = self._start
        rate = (step - first) / max(time.perf_counter() - began, 1e-9)
        parts = [f"step {step}"]
        if trainer.max_steps and trainer.max_steps > 0:
            parts[0] += f"/{trainer.max_steps} ({100 * step / trainer.max_steps:.0f}%)"
            parts.append(f"eta {_duration((trainer.max_steps - step) / max(rate, 1e-9))}")
        parts.insert(1, f"{rate:.1f} steps/s")
        parts += _metric_items(_step_values(trainer.progress_bar_metrics), prefix="train/")
        log.info(" · ".join(parts))

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        line = validation_line(trainer)
        if line is not None:
            log.info(line)


def validation_line(trainer: pl.Trainer) -> str | None:
    """``validation at step 500 · val/exact_acc 0.93 · val/loss 0.006`` after a fit's validation
    on global rank 0; None elsewhere (the sanity check; ``validate``, which ends with its summary
    naming the checkpoint's step; other ranks; no ``val/`` metric)."""
    fitting = trainer.state.fn == TrainerFn.FITTING
    if trainer.sanity_checking or not fitting or not trainer.is_global_zero:
        return None
    items = _metric_items(scalars(trainer.callback_metrics), prefix="val/")
    if not items:
        return None
    return f"validation at step {trainer.global_step} · {' · '.join(items)}"


class ModelLine(ModelSummary):
    """The model in one line instead of Lightning's table (which, for a task, lists a few
    containers and "Total FLOPs: 0" unless the task sets ``example_input_array``):
    ``model: SequenceReversalTask (net: SequenceTransformer) · 101 K parameters, 101 K trainable
    · 0.4 MB``."""

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        summary = self._summary(trainer, pl_module)
        if not trainer.is_global_zero:
            return
        parts = [
            f"{name}: {type(child).__name__}"
            for name, child in pl_module.named_children()
            if any(True for _ in child.parameters())
        ]
        line = f"model: {type(pl_module).__name__}" + (f" ({', '.join(parts)})" if parts else "")
        trainable = get_human_readable_count(int(summary.trainable_parameters))
        line += f" · {get_human_readable_count(int(summary.total_parameters))} parameters, "
        line += f"{trainable} trainable · {summary.model_size:.1f} MB"
        flops = int(getattr(summary, "total_flops", 0) or 0)
        if flops:
            line += f" · {get_human_readable_count(flops)} FLOPs a forward pass"
        log.info(line)


class RunStarted(Callback):
    """Marks that a subcommand got past setup: errors from then on are the run's, not the
    configuration's (``cli.command_line`` keeps their traceback). For ``fit``, setup includes
    the task's ``on_fit_start`` (a LoRA task loads its base checkpoint there). Class-level: one
    run per process at a time."""

    started: bool = False

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        type(self).started = True

    on_sanity_check_start = on_validation_start = on_test_start = on_predict_start = on_train_start


def progress_callbacks(callbacks: Sequence[Callback], *, terminal: bool) -> list[Callback]:
    """Swap Lightning's default bar for ``StepProgressBar`` on a terminal, for ``PlainProgress``
    elsewhere, and its model table for ``ModelLine``; a progress bar or summary the user
    configured is left alone, and no bar stays no bar."""
    out = list(callbacks)
    for i, callback in enumerate(out):
        # Lightning's defaults (Rich when installed, else TQDM), not a user's subclass.
        if type(callback) in (TQDMProgressBar, RichProgressBar):
            out[i] = StepProgressBar() if terminal else PlainProgress()
        elif type(callback) in (ModelSummary, RichModelSummary):
            out[i] = ModelLine()
    if not any(isinstance(c, ProgressBar | PlainProgress) for c in out) and not terminal:
        out.append(PlainProgress())
    return [*out, RunStarted()]


def summary_lines(
    subcommand: str,
    *,
    seconds: float,
    metrics: Mapping[str, Any],
    global_step: int | None = None,
    checkpoint: tuple[str, int] | None = None,
    best: str | None = None,
    last: str | None = None,
    log_dir: str | None = None,
    predictions: Sequence[Path] = (),
) -> list[str]:
    """The lines a subcommand ends with (paths only where something was written).

    ``global_step`` is where a fit ended; ``checkpoint`` the path and step of the checkpoint
    that validate, test or predict evaluated.
    """
    head = f"{subcommand} done in {_duration(seconds)}"
    if global_step is not None:
        head += f" at step {global_step}"
    if checkpoint is not None:
        head += f" (checkpoint of step {checkpoint[1]}: {checkpoint[0]})"
    lines = [head]
    if best:
        lines.append(f"  best checkpoint: {best}")
    if last:
        lines.append(f"  last checkpoint: {last}")
    if log_dir:
        lines.append(f"  logs: {log_dir}   (tensorboard --logdir {Path(log_dir).parent})")
    lines += [f"  predictions: {p}" for p in predictions]
    final = {k: v for k, v in scalars(metrics).items() if k.startswith(("val/", "test/"))}
    items = _metric_items(final, prefix="")
    if items:
        lines.append("  metrics: " + ", ".join(items))
    return lines


def terminal() -> bool:
    """Whether progress goes to a terminal (Lightning's bars write to stderr)."""
    return sys.stderr.isatty()


def _step_values(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """Per-step values under their plain name: ``train/loss_step`` -> ``train/loss``."""
    return {k.removesuffix("_step"): v for k, v in metrics.items() if not k.endswith("_epoch")}


def _metric_items(metrics: Mapping[str, Any], *, prefix: str) -> list[str]:
    # Epoch aggregates only ("train/loss_step" duplicates "train/loss"); hp/ is for the HParams tab.
    keep = {
        k: v
        for k, v in metrics.items()
        if k.startswith(prefix) and not k.endswith("_step") and not k.startswith("hp/")
    }
    return [f"{k} {float(v):.4g}" for k, v in sorted(keep.items(), key=lambda kv: _natural(kv[0]))]


def _natural(name: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key reading digit runs as numbers: ``query_acc_d8-15`` before ``query_acc_d16-31``,
    ``L64_P4`` before ``L128_P8`` (a plain sort puts the longer number first)."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", name)
    )


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    minutes, secs = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"
