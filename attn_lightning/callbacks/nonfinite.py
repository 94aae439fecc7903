"""Stop a run whose loss or gradient is no longer finite, keeping the last finite weights.

A learning rate far too high (``--model.init_args.lr 1e6``) makes the loss NaN within two steps;
Lightning then trains on for the whole budget, logs NaN everywhere and exits 0. ``NonFiniteStop``
checks each optimiser step's training loss and (without a gradient scaler) its gradient norm:

* a non-finite step is **skipped**: its gradients are dropped, so the optimiser leaves the
  weights (and its own state) as they were. One overflow then costs one step, as under fp16's
  gradient scaler, instead of turning every weight into NaN through the update;
* after ``patience`` such steps in a row the run stops: ``last.ckpt`` is written (the weights
  of the last finite step) and ``NonFiniteTraining`` is raised with one line naming the first
  bad step, its loss and gradient norm, and what to try; ``train.py`` prints it and exits 3.

Under fp16 mixed precision the ``GradScaler`` already skips steps with inf/NaN gradients (and
overflows for a few steps while it calibrates), so only the loss is checked there.

Cost: one gradient norm (one fused kernel per device) and one host transfer of two numbers per
optimiser step; under DDP one all-reduce of a flag, so every rank skips and stops together.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import Tensor

from attn_lightning.attention.base import CHECK_FINITE_ENV

log = logging.getLogger("attn_lightning")


class NonFiniteTraining(RuntimeError):
    """A run stopped by ``NonFiniteStop``; the message is one line for the user."""


class NonFiniteStop(Callback):
    """Skip optimiser steps whose loss or gradient norm is NaN/inf; stop after ``patience`` in a
    row (module docstring).

    Args:
        patience: consecutive non-finite steps before the run stops (default 3: a transient
            overflow is skipped, a diverged run ends within a few steps); 0 disables the check
            (and the skipping).
    """

    def __init__(self, *, patience: int = 3) -> None:
        if patience < 0:
            raise ValueError(f"patience must be >= 0 (0 disables), got {patience}")
        self.patience = patience
        self._loss: Tensor | None = None  # the sum of this step's (accumulated) batch losses
        self._step = 0  # the optimiser step the batches belong to
        # This step's (loss, gradient norm or None where not measured) if it was not finite.
        self._bad: tuple[float, float | None] | None = None
        self._streak: list[tuple[int, float, float | None]] = []  # (step, loss, norm) in a row

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._step, self._loss, self._bad, self._streak = trainer.global_step, None, None, []

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor
    ) -> None:
        if self.patience:
            detached = loss.detach().float().sum()
            self._loss = detached if self._loss is None else self._loss + detached

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        if not self.patience or self._loss is None:
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        norm = self._loss.new_zeros(())  # under a scaler (or without grads) the loss alone
        if grads and scaler is None:
            norm = torch.nn.utils.get_total_norm(grads).float().to(self._loss.device)
        loss, grad_norm = torch.stack([self._loss, norm]).tolist()  # one host transfer
        bad = not (math.isfinite(loss) and math.isfinite(grad_norm))
        # Each DDP rank has its own loss: skip and stop on every rank if any rank saw one.
        if not trainer.strategy.reduce_boolean_decision(bad, all=False):
            return
        if self._bad is None:
            self._bad = (loss, grad_norm if scaler is None else None)
        for param in params:  # the optimiser leaves a parameter without a gradient as it is
            param.grad = None

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not self.patience or trainer.global_step == self._step:  # accumulating
            return
        if self._bad is None:
            self._streak = []
        else:
            self._streak.append((self._step, *self._bad))
        self._step, self._loss, self._bad = trainer.global_step, None, None
        if len(self._streak) >= self.patience:
            raise NonFiniteTraining(self._stop(trainer, pl_module))

    def _stop(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> str:
        """Save ``last.ckpt`` if its weights are finite; the line that says what happened."""
        step, loss, norm = self._streak[0]
        gradient = "" if norm is None else f", gradient norm {norm:.4g}"
        saved = _save_last(trainer, pl_module)
        return (
            f"training stopped after step {trainer.global_step}: the loss or its gradient was not "
            f"finite {len(self._streak)} steps in a row (first at step {step}: loss {loss:.4g}"
            f"{gradient}); {saved}. Try a lower --model.init_args.lr, --trainer.precision "
            f"32-true, or --debug ({CHECK_FINITE_ENV}=1) to name the first attention layer with "
            "a NaN/inf input (--nonfinite_stop.patience: bad steps in a row before stopping, "
            "0: never)"
        )


def _save_last(trainer: pl.Trainer, pl_module: pl.LightningModule) -> str:
    """Write ``last.ckpt`` (the weights of the last finite step: the bad steps were skipped) and
    say where, or why not."""
    finite = all(bool(p.isfinite().all()) for p in pl_module.parameters())
    if not trainer.strategy.reduce_boolean_decision(finite, all=True):
        return "the weights are not finite: last.ckpt left as it was"
    written = []
    for callback in trainer.checkpoint_callbacks:
        if isinstance(callback, ModelCheckpoint) and callback.save_last and callback.dirpath:
            candidates = callback._monitor_candidates(trainer)
            callback._save_last_checkpoint(trainer, candidates)  # as RunCheckpoint saves it
            written.append(callback.last_model_path)
    if not written:
        return "no last.ckpt (checkpointing is off)"
    return f"the last finite weights are in {', '.join(written)}"
