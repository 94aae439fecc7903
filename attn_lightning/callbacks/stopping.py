"""How a fit stops on Ctrl-C or SIGTERM: at the end of the step it is in and of that step's
validation, where ``RunCheckpoint`` saves ``last.ckpt``.

Lightning's SIGTERM path sets a flag (``trainer.received_sigterm``) that its training loop reads
at a step's end, but that its validation loop reads after every validation batch, abandoning the
validation there. The checkpoint written at the stop then holds the loop past that validation,
so the resumed run skipped it as well: a signal during validation lost that validation for good
(val/loss at steps 49, 149, 199 where the uninterrupted run has 49, 99, 149, 199). So while a
fit validates, a signal is held back and delivered when the validation ends, as if it had come
then; a flag already set when a validation starts (a signal during the step it follows) is held
back the same way.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl

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
