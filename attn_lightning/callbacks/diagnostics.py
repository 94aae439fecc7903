"""Per-layer scalars of the attention backends (``Attention.diagnostics``), logged to TensorBoard.

The learned polynomial's coefficients ``a_i`` and similar backend-owned quantities explain what a
layer has learned (the thesis's "high magnitude" coefficients); logging them while training shows
when they move, not only where they end.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback

from attn_lightning.attention import Attention


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
