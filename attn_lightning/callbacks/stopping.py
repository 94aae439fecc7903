"""How a fit stops: on Ctrl-C or SIGTERM at the end of the step it is in and of that step's
validation, where ``RunCheckpoint`` saves ``last.ckpt`` (``SignalStop``); and when its loss or
gradient is no longer finite, keeping the last finite weights (``NonFiniteStop``).

Lightning's SIGTERM path sets a flag (``trainer.received_sigterm``) that its training loop reads
at a step's end, but that its validation loop reads after every validation batch, abandoning the
validation there. The checkpoint written at the stop then holds the loop past that validation,
so the resumed run skipped it as well: a signal during validation lost that validation for good.
So while a fit validates, a signal is held back and delivered when the validation ends, as if it
had come then; a flag already set when a validation starts (a signal during the step it follows)
is held back the same way.

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
import signal
import threading
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from torch import Tensor

from attn_lightning.attention.base import CHECK_FINITE_ENV

log = logging.getLogger("attn_lightning")


class SignalStop:
    """The Ctrl-C and SIGTERM handlers of one fit (main thread only), held by ``RunCheckpoint``.

    The first Ctrl-C sets Lightning's SIGTERM flag: the loop stops at the end of the step (and
    its validation) on every DDP rank and raises ``SIGTERMException``. The handler it replaced
    comes back at once, so a second Ctrl-C stops at once, unsaved. An ignored SIGINT stays
    ignored: a shell starts background jobs so (POSIX), and a Ctrl-C typed at that terminal is
    meant for the foreground job. SIGTERM goes to the handler it replaced (Lightning's), held
    back during validation.
    """

    def __init__(self) -> None:
        self.ctrl_c = False  # whether the stop was asked for by Ctrl-C
        self._trainer: pl.Trainer | None = None
        self._sigint: Any = None  # the handlers ours replaced
        self._sigterm: Any = None
        self._validating = False
        self._held: Callable[[], None] | None = None  # a signal to deliver when validation ends
        self._step_started: int | None = None  # global_step when the current batch started

    def start(self, trainer: pl.Trainer) -> None:
        """Install the handlers (``on_train_start``: after Lightning installed its own)."""
        self.ctrl_c, self._trainer = False, trainer
        self._validating, self._held, self._step_started = False, None, None
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._sigint = signal.signal(signal.SIGINT, self._on_ctrl_c)
        if callable(signal.getsignal(signal.SIGTERM)):  # Lightning's notifier (or a user's)
            self._sigterm = signal.signal(signal.SIGTERM, self._on_sigterm)

    def batch_started(self, trainer: pl.Trainer) -> None:
        self._step_started = trainer.global_step

    def batch_ended(self) -> None:
        self._step_started = None

    def validation_started(self, trainer: pl.Trainer) -> None:
        """Hold back a stop asked for before this validation (during the step it follows)."""
        if trainer is not self._trainer or trainer.sanity_checking:
            return
        self._validating = True
        if trainer.received_sigterm and self._held is None:
            trainer._signal_connector.received_sigterm = False
            self._held = self._set_flag

    def validation_ended(self) -> None:
        """Deliver the signal held back during the validation that just ended."""
        self._validating = False
        held, self._held = self._held, None
        if held is not None:
            held()

    def stop(self) -> None:
        """Give the replaced handlers back (the run ended, or stopped)."""
        if threading.current_thread() is threading.main_thread():
            if self._sigint is not None and signal.getsignal(signal.SIGINT) == self._on_ctrl_c:
                signal.signal(signal.SIGINT, self._sigint)
            if self._sigterm is not None and signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._sigterm)
        self._sigint = self._sigterm = self._held = None
        self._validating = False

    def _stop_step(self, trainer: pl.Trainer) -> int:
        """The step the run stops after: the one running (or whose validation runs)."""
        if self._validating or self._step_started is None:
            return trainer.global_step
        return self._step_started + 1

    def _set_flag(self) -> None:
        if self._trainer is not None:
            self._trainer._signal_connector.received_sigterm = True

    def _on_ctrl_c(self, signum: int, frame: Any) -> None:
        trainer = self._trainer
        signal.signal(signal.SIGINT, self._sigint or signal.default_int_handler)
        if trainer is None or not hasattr(trainer, "_signal_connector"):
            raise KeyboardInterrupt
        self.ctrl_c = True
        if trainer.is_global_zero:
            log.info(
                "Ctrl-C: stopping after step %d%s and saving last.ckpt (Ctrl-C again to stop now, "
                "unsaved)",
                self._stop_step(trainer),
                " and its validation" if self._validating else "",
            )
        if self._validating:
            self._held = self._set_flag
        else:
            self._set_flag()

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        previous = self._sigterm
        if not callable(previous):
            return
        if self._validating:
            self._held = lambda: previous(signum, None)
        else:
            previous(signum, frame)


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
