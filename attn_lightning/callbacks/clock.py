"""A run's fit time across resumes: what the run cost, not what its last process took.

A run stopped (Ctrl-C, SIGTERM, a session that ended) and resumed from its ``last.ckpt`` is
several processes. ``FitClock`` saves the fit seconds so far in every checkpoint (as callback
state) and, on resume, starts from the saved value, so the metrics file's ``fit_seconds`` is the
time of all processes up to each one's last checkpoint plus the last process's whole fit. Work
done after a process's last checkpoint and lost with it is not counted (the resumed process does
it again, and that is counted).

The CLI registers the clock for every subcommand, not only ``fit``: Lightning restores callback
states from ``--ckpt_path`` for ``validate``/``test``/``predict`` too, and warns "Please add the
following callbacks: ['FitClock']" for a saved state without its callback. There the restored
value is read by nothing (those subcommands record no ``fit_seconds``).
"""

from __future__ import annotations

import time
from typing import Any

from lightning.pytorch.callbacks import Callback


class FitClock(Callback):
    """Fit seconds of a run over all its processes (module docstring).

    Args:
        started: ``time.perf_counter()`` when this process's fit began (the CLI's start);
            default: now.
    """

    def __init__(self, started: float | None = None) -> None:
        self.started = time.perf_counter() if started is None else started
        # None: a fresh run, or a checkpoint from before this clock (its earlier time unknown).
        self.earlier_seconds: float | None = None

    def seconds(self) -> float:
        """This process's fit seconds so far plus the earlier processes' (unknown: 0)."""
        return (self.earlier_seconds or 0.0) + time.perf_counter() - self.started

    def state_dict(self) -> dict[str, Any]:
        return {"fit_seconds": self.seconds()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Also on validate/test/predict from a checkpoint (harmless: nothing reads it there).
        self.earlier_seconds = float(state_dict["fit_seconds"])
