"""Callbacks that reach into the attention backends while training: the random-feature redraw
(the same draw on every DDP rank and in a resumed run as in an uninterrupted one) and per-layer
diagnostics (``Attention.diagnostics``) logged to TensorBoard.

The learned polynomial's coefficients ``a_i`` and similar backend-owned quantities explain what a
layer has learned (the thesis's "high magnitude" coefficients); logging them while training shows
when they move, not only where they end.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import nn

from attn_lightning.attention import Attention

log = logging.getLogger(__name__)


def redraw_generator(seed: int, step: int) -> torch.Generator:
    """A CPU generator seeded from ``(seed, step)`` alone, so every DDP rank draws the same."""
    digest = hashlib.sha256(f"{seed}:{step}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)


def redraw_all_features(module: nn.Module, *, seed: int, step: int) -> int:
    """Call ``redraw_features(generator)`` on every submodule that has it; return how many.

    One generator is shared by the modules in ``modules()`` order, so layers get different but
    reproducible features.
    """
    generator = redraw_generator(seed, step)
    count = 0
    for sub in module.modules():
        redraw = getattr(sub, "redraw_features", None)
        if callable(redraw):
            redraw(generator)
            count += 1
    return count


class FeatureRedraw(Callback):
    """Redraw random features (Performer, random PolySketch) every ``every_n_steps`` steps.

    FAVOR+ needs periodic redraws to match softmax (Choromanski et al. 2021, §4). The draw depends
    only on ``(seed, global_step)``: identical on every rank, and a resumed run redraws exactly as
    an uninterrupted one would. The features themselves are buffers saved in checkpoints.

    Args:
        every_n_steps: optimiser steps between redraws; 0 disables redrawing.
        seed: mixed with the step into the generator's seed.
    """

    def __init__(self, *, every_n_steps: int = 1000, seed: int = 0) -> None:
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0 (0 disables), got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.seed = seed
        self._last_step = -1

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        # With gradient accumulation several batches share a step: redraw once per step.
        if self.every_n_steps == 0 or step == 0 or step % self.every_n_steps:
            return
        if step == self._last_step:
            return
        self._last_step = step
        count = redraw_all_features(pl_module, seed=self.seed, step=step)
        if count:
            log.debug("redrew random features of %d module(s) at step %d", count, step)


class AttentionDiagnostics(Callback):
    """Every ``every_n_steps`` optimiser steps, log ``attention/<layer>/<key>`` for every backend.

    ``<layer>`` is the module path of the backend inside the task with a trailing ``.backend``
    dropped (``net.encoder.layers.0.attn``); ``<key>`` comes from the backend's ``diagnostics()``
    (e.g. ``a0``…``a4``). Backends without diagnostics cost one empty call. Rank 0 only, through
    ``logger.log_metrics`` at the step index (as ``grad/*``), outside the autograd graph.

    Args:
        every_n_steps: optimiser steps between logs; 0 disables the callback.
    """

    def __init__(self, *, every_n_steps: int = 50) -> None:
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0 (0 disables), got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self._last_step = -1

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # At a step's first batch: the values the coming update starts from (step 0 = init).
        step = trainer.global_step
        if self.every_n_steps == 0 or step % self.every_n_steps or step == self._last_step:
            return
        if not trainer.is_global_zero or not trainer.loggers:
            return
        self._last_step = step
        metrics = collect_diagnostics(pl_module)
        if metrics:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)


def collect_diagnostics(module: Any) -> dict[str, float]:
    """``{"attention/<layer>/<key>": value}`` over every ``Attention`` submodule of ``module``."""
    metrics: dict[str, float] = {}
    for name, sub in module.named_modules():
        if isinstance(sub, Attention):
            layer = name.removesuffix(".backend")
            prefix = f"attention/{layer}/" if layer else "attention/"
            for key, value in sub.diagnostics().items():
                metrics[prefix + key] = float(value)
    return metrics
