"""Gradient norms by parameter group and loss-spike events, logged to TensorBoard.

Spiky training losses are usually explained by the gradient norm of the step before the spike and
by which part of the model it came from; this callback logs both, cheaply (no extra backward, one
host transfer per logged step).
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from torch import Tensor, nn

from attn_lightning.models.multihead import MultiHeadAttention
from attn_lightning.models.positional import POSITIONAL_ENCODINGS
from attn_lightning.models.transformer import FeedForward

log = logging.getLogger(__name__)

GROUPS = ("attention", "feedforward", "embedding", "other")
# Checked in this order on each module, outermost module first: a parameter belongs to the group
# of the outermost module that claims it (a LoRA layer inside an attention layer is attention).
GROUP_TYPES: tuple[tuple[str, tuple[type[nn.Module], ...]], ...] = (
    ("attention", (MultiHeadAttention,)),
    ("feedforward", (FeedForward,)),
    ("embedding", (nn.Embedding, *POSITIONAL_ENCODINGS.values())),
)


class ParameterGroups:
    """Parameters of a module assigned to ``GROUPS`` by the type of the module that holds them.

    * attention: everything inside a ``MultiHeadAttention``: the q/k/v/out projections and the
      backend's own parameters (learned sketches, polynomial coefficients);
    * feedforward: ``FeedForward``; embedding: ``nn.Embedding`` and positional tables;
    * other: the rest (norms, output heads, DETR's box MLP, ...).
    """

    def __init__(self, module: nn.Module) -> None:
        group_of: dict[int, int] = {}
        for sub in module.modules():  # parents before children
            for index, (_, types) in enumerate(GROUP_TYPES):
                if isinstance(sub, types):
                    for param in sub.parameters():
                        group_of.setdefault(id(param), index)
                    break
        other = GROUPS.index("other")
        self.params = [(p, group_of.get(id(p), other)) for p in module.parameters()]

    def global_norm(self) -> Tensor | None:
        """``‖(‖g_p‖)_p‖₂`` of the current ``.grad`` as a 0-dim float32 tensor on the grads'
        device (no host transfer); None when no parameter has a gradient."""
        grads = [p.grad for p, _ in self.params if p.grad is not None]
        if not grads:
            return None
        device = grads[0].device
        if all(g.dtype == torch.float32 and not g.is_sparse and g.device == device for g in grads):
            # Every step: the fused multi-tensor norm (one launch per device, not one per tensor).
            return torch.nn.utils.get_total_norm(grads).float()
        return torch.linalg.vector_norm(torch.stack([_norm(g).to(device) for g in grads]))

    def norms(self) -> dict[str, float]:
        """L2 norms of the current ``.grad``: ``global_norm`` and one per group that has grads.

        ``global = ‖(‖g_p‖)_p‖₂ = sqrt(Σ_group norm²)`` over parameters whose ``.grad`` is set; the
        per-parameter norms are computed on device and moved to the host in one ``tolist()``.
        Empty when no parameter has a gradient.
        """
        grads = [(p.grad, g) for p, g in self.params if p.grad is not None]
        if not grads:
            return {}
        device = grads[0][0].device
        per_param = torch.stack([_norm(grad).to(device) for grad, _ in grads])  # (P,) float32
        index = torch.tensor([g for _, g in grads], device=device)
        squares = torch.zeros(len(GROUPS), device=device).index_add_(0, index, per_param.square())
        values = torch.cat([torch.linalg.vector_norm(per_param).unsqueeze(0), squares.sqrt()])
        total, *groups = values.tolist()
        present = {g for _, g in grads}
        return {"global_norm": total} | {
            name: groups[i] for i, name in enumerate(GROUPS) if i in present
        }


def _norm(grad: Tensor) -> Tensor:
    # Half-precision grads are reduced in float32 (a bf16 sum of squares loses the small terms).
    values = grad.coalesce().values() if grad.is_sparse else grad
    dtype = torch.promote_types(values.dtype, torch.float32)
    return torch.linalg.vector_norm(values, dtype=dtype).float()


class SpikeRow(NamedTuple):
    """One step's verdict: ``flag`` 1.0 for a spike, ``total`` spikes so far, the step's
    ``loss`` and ``ratio`` = loss / the median it was compared with (0 before the window fills).

    With gradient norms given to ``update`` (NaN without): ``grad_norm``, the step's own global
    norm before clipping; ``grad_ratio``, that over the median norm of the previous ``window``
    steps; ``prior_grad_ratio``, the previous step's norm over the same median: the update that
    moved the weights to where the loss jumped (NaN for both before the window fills).
    """

    step: int
    flag: float
    total: int
    loss: float
    ratio: float
    grad_norm: float = math.nan
    grad_ratio: float = math.nan
    prior_grad_ratio: float = math.nan


class LossSpikeDetector:
    """Flag a step whose loss exceeds ``factor`` × the median of the previous ``window`` losses.

    The comparison stays on the loss's device (no host sync per step); flags wait in ``pending``
    until ``flush`` moves them to the host in one ``tolist()``. Nothing is flagged until
    ``window`` losses have been seen. The median of an even window is the lower middle value.
    Each row keeps the step's loss and its ratio to the median: at losses near 1e-5 a 3× "spike"
    is noise, at 0.1 it is an instability, and the flag alone cannot tell them apart. Given each
    step's gradient norm, it keeps a window of those too, so a spike's row says whether the
    gradient of that step and of the step before it stood out (``SpikeRow``).

    Args:
        factor: k; a spike is ``loss > k · median``.
        window: w, the number of previous step losses the median is taken over.
    """

    def __init__(self, *, factor: float = 3.0, window: int = 50) -> None:
        if factor <= 0 or window < 1:
            raise ValueError(f"factor must be > 0 and window >= 1, got {factor} and {window}")
        self.factor = factor
        self.losses: deque[Tensor] = deque(maxlen=window)
        self.grad_norms: deque[Tensor] = deque(maxlen=window)
        self.pending: list[tuple[int, Tensor]] = []  # (step, [flag, loss, ratio, grad...])
        self.count = 0

    def update(self, step: int, loss: Tensor, grad_norm: Tensor | None = None) -> None:
        """Record the training loss of optimiser step ``step`` (a 0-dim tensor) and, if known,
        the global gradient norm of that step (before clipping)."""
        loss = loss.detach().float().reshape(())
        nan = torch.full((), math.nan, device=loss.device)
        if len(self.losses) == self.losses.maxlen:
            median = torch.stack(list(self.losses)).median()
            flag = (loss > self.factor * median).float()
            ratio = loss / median
        else:
            flag = ratio = torch.zeros((), device=loss.device)
        norm = nan if grad_norm is None else grad_norm.detach().float().reshape(()).to(nan)
        grad_ratio = prior_ratio = nan
        if len(self.grad_norms) == self.grad_norms.maxlen:
            grad_median = torch.stack(list(self.grad_norms)).median()
            grad_ratio, prior_ratio = norm / grad_median, self.grad_norms[-1] / grad_median
        row = torch.stack([flag, loss, ratio, norm, grad_ratio, prior_ratio])
        self.pending.append((step, row))
        self.losses.append(loss)
        if grad_norm is None:
            self.grad_norms.clear()  # a window of consecutive steps only
        else:
            self.grad_norms.append(norm)

    def flush(self) -> list[SpikeRow]:
        """One ``SpikeRow`` per pending step, oldest first."""
        if not self.pending:
            return []
        values = torch.stack([row for _, row in self.pending]).tolist()
        rows = []
        for (step, _), (flag, loss, ratio, *grad) in zip(self.pending, values, strict=True):
            self.count += int(flag)
            rows.append(SpikeRow(step, flag, self.count, loss, ratio, *grad))
        self.pending.clear()
        return rows


class GradientTracker(Callback):
    """Log gradient norms every ``every_n_steps`` optimiser steps and loss-spike events.

    TensorBoard scalars, at the step index of the update (as ``train/loss_step``):

    * ``grad/global_norm``, ``grad/attention``, ``grad/feedforward``, ``grad/embedding``,
      ``grad/other``: L2 norms of the gradients (see ``ParameterGroups``), every
      ``every_n_steps`` steps from step 0;
    * ``train/loss_spike`` (1 or 0) and ``train/loss_spikes`` (running count) at every step,
      written in batches every ``every_n_steps`` steps and at the end of training;
    * at a spike's step only: ``train/loss_at_spike`` (that step's loss) and
      ``train/loss_spike_ratio`` (its ratio to the running median), the spike's size; and the
      gradient there, measured at every step (one global norm, kept on the device, so a spike
      between two ``grad/`` logs still has its own): ``grad/norm_at_spike`` (that step's global
      norm before clipping), ``grad/norm_at_spike_ratio`` (over the median norm of the
      ``spike_window`` steps before) and ``grad/norm_before_spike_ratio`` (the previous step's
      norm over the same median: the update into the spike).

    The loss watched is the training step's ``measured_loss`` output when it has one (a loss
    measured more exactly than the one trained on), else its ``loss``.

    The norms are read in ``on_before_optimizer_step``, which Lightning (2.6) calls after the
    backward passes of the step (all accumulated batches, grads unscaled under fp16 AMP and
    all-reduced under DDP) and *before* gradient clipping: the unclipped norm is the one that
    explains a spike. They are written with ``logger.log_metrics`` rather than ``pl_module.log``:
    ``log`` writes only every ``trainer.log_every_n_steps`` steps (so most spike flags would be
    dropped) and puts values into ``callback_metrics`` (the metrics file, the progress line).
    Only rank 0 computes and logs; under DDP its grads are the global ones, its loss is its own
    shard's. Sharded strategies (FSDP) would give the norm of rank 0's shard only.

    Args:
        every_n_steps: optimiser steps between gradient-norm logs; 0 disables the callback.
        spike_factor: k; a step's loss above k × the running median is a spike.
        spike_window: w, the number of previous step losses in the running median.

    Attributes:
        spike_listeners: callables given each spike's ``SpikeRow`` when it is logged (rank 0).
    """

    def __init__(
        self, *, every_n_steps: int = 20, spike_factor: float = 3.0, spike_window: int = 50
    ) -> None:
        if every_n_steps < 0:
            raise ValueError(f"every_n_steps must be >= 0 (0 disables), got {every_n_steps}")
        self.every_n_steps = every_n_steps
        self.spikes = LossSpikeDetector(factor=spike_factor, window=spike_window)
        self._groups: ParameterGroups | None = None
        self._last_logged = -1
        self._step = 0
        self._step_loss: Tensor | None = None
        self._step_grad_norm: Tensor | None = None
        # Called with each spike's row as it is logged (the run record's spikes.csv).
        self.spike_listeners: list[Callable[[SpikeRow], None]] = []

    def _active(self, trainer: pl.Trainer) -> bool:
        return self.every_n_steps > 0 and trainer.is_global_zero and bool(trainer.loggers)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # After the strategy has wrapped and moved the model: these are the parameters it steps.
        self._groups = ParameterGroups(pl_module)
        self._step = trainer.global_step
        # A resumed run's windows come from the CPU checkpoint.
        for window in (self.spikes.losses, self.spikes.grad_norms):
            window.extend([window.popleft().to(pl_module.device) for _ in range(len(window))])

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        step = trainer.global_step
        # Several optimisers step at the same global step: the first one's grads only.
        if not self._active(trainer) or step == self._last_logged:
            return
        self._last_logged = step
        groups = self._groups or ParameterGroups(pl_module)
        self._step_grad_norm = groups.global_norm()  # for the spike detector, every step
        if step % self.every_n_steps:
            return
        norms = groups.norms()
        if norms:
            _log(trainer, {f"grad/{name}": value for name, value in norms.items()}, step)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not self._active(trainer):
            return
        # A task may return the loss measured more exactly than the one it trains on (the
        # reversal task's float64 cross-entropy): spikes are judged on that one.
        measured = outputs.get("measured_loss") if isinstance(outputs, Mapping) else None
        loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
        if isinstance(measured, Tensor):
            # Lightning divides "loss" (not the task's other outputs) by the batches per step.
            loss = measured / trainer.accumulate_grad_batches
        if isinstance(loss, Tensor):
            # Lightning divides each accumulated batch's loss by the number of batches: the sum
            # over the step's batches is the step's mean loss.
            detached = loss.detach().float()
            self._step_loss = detached if self._step_loss is None else self._step_loss + detached
        if trainer.global_step == self._step:  # accumulating: no optimiser step yet
            return
        if self._step_loss is not None:
            self.spikes.update(self._step, self._step_loss, self._step_grad_norm)
        self._step, self._step_loss, self._step_grad_norm = trainer.global_step, None, None
        if len(self.spikes.pending) >= self.every_n_steps:
            self._flush(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._active(trainer):
            self._flush(trainer)

    def _flush(self, trainer: pl.Trainer) -> None:
        for row in self.spikes.flush():
            metrics = {"train/loss_spike": row.flag, "train/loss_spikes": float(row.total)}
            if row.flag:
                metrics |= {"train/loss_at_spike": row.loss, "train/loss_spike_ratio": row.ratio}
                gradient = {
                    "grad/norm_at_spike": row.grad_norm,
                    "grad/norm_at_spike_ratio": row.grad_ratio,
                    "grad/norm_before_spike_ratio": row.prior_grad_ratio,
                }
                metrics |= {k: v for k, v in gradient.items() if not math.isnan(v)}
                for listener in self.spike_listeners:
                    listener(row)
                log.debug("loss spike at step %d (%d so far)", row.step, row.total)
            _log(trainer, metrics, row.step)

    def state_dict(self) -> dict[str, Any]:
        # The running count and the median window continue across a resume.
        pending = self.spikes.pending
        flagged = int(torch.stack([r[0] for _, r in pending]).sum().item()) if pending else 0
        window = [float(loss) for loss in self.spikes.losses]
        norms = [float(norm) for norm in self.spikes.grad_norms]
        return {
            "loss_spikes": self.spikes.count + flagged,
            "loss_window": window,
            "grad_norm_window": norms,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.spikes.count = int(state_dict.get("loss_spikes", 0))
        for window, key in (
            (self.spikes.losses, "loss_window"),
            (self.spikes.grad_norms, "grad_norm_window"),
        ):
            window.clear()
            window.extend(torch.tensor(v) for v in state_dict.get(key, []))

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Flags still pending would be lost to a run resumed from this checkpoint: write them.
        if self._active(trainer):
            self._flush(trainer)


def _log(trainer: pl.Trainer, metrics: dict[str, float], step: int) -> None:
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=step)
