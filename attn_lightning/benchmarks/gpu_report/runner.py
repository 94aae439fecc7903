"""Run the report's stages one after another, each in its own process, within one budget.

A stage is a command line. Each runs in a child process of its own session (so the whole group
can be killed), its stdout and stderr going to ``<out>/logs/<stage>.log``. Stage i may run for
``remaining · w_i / Σ_{j≥i} w_j`` seconds (weights: what it is worth, in the plan's order of
value), so what one stage leaves unused goes to the ones after it; a stage whose share is under
``min_stage_s`` is not started. A stage past its share is sent SIGTERM, then SIGKILL after
``grace_s``: a hung kernel cannot keep the machine.

SIGTERM and SIGINT to this process stop the run, not the report: the running stage's group is
killed the same way, the stages not yet run are recorded as such, and ``run_stages`` returns so
the caller can still write its page and archive (training frameworks such as Lightning trap
SIGTERM in their own process; a child here is killed as a group whatever it traps).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

DONE, FAILED, TIMED_OUT, STOPPED, NOT_RUN, SKIPPED = (
    "done",
    "failed",
    "timed out",
    "stopped",
    "not run",
    "skipped",
)


@dataclass(frozen=True)
class Stage:
    """One step of the report.

    Attributes:
        name: file-name-safe id (its log is ``logs/<name>.log``).
        what: one line for the page.
        argv: the child's command line.
        weight: its share of the budget, relative to the stages after it.
        skip: why it is not run on this machine (None: run it).
    """

    name: str
    what: str
    argv: tuple[str, ...]
    weight: float = 1.0
    skip: str | None = None


@dataclass
class StageResult:
    """What became of a stage: ``status`` one of done, failed, timed out, stopped, not run,
    skipped; ``seconds`` it ran; the child's exit code; a note (why it did not run or end)."""

    name: str
    what: str
    status: str
    seconds: float = 0.0
    returncode: int | None = None
    log: str = ""
    note: str = ""


@dataclass
class _Signals:
    """The stop request, set by the signal handler and read by the wait loop."""

    received: int | None = None
    names: dict[int, str] = field(default_factory=dict)


@contextmanager
def _stop_on_signals(state: _Signals) -> Iterator[None]:
    """SIGTERM/SIGINT set ``state.received`` instead of killing this process (main thread only:
    Python delivers signals there; elsewhere the defaults stay)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def handler(signum: int, _frame: object) -> None:
        state.received = signum

    for sig in (signal.SIGTERM, signal.SIGINT):
        state.names[sig] = sig.name
        previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def kill_group(proc: subprocess.Popen, *, grace_s: float) -> None:
    """SIGTERM to the child's process group, SIGKILL if it is still there after ``grace_s``."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _share(remaining: float, weights: Sequence[float]) -> float:
    """This stage's seconds: ``remaining · w_0 / Σ w``."""
    total = sum(weights)
    return remaining * weights[0] / total if total > 0 else remaining


def run_stages(
    stages: Sequence[Stage],
    *,
    budget_s: float,
    out: Path,
    cwd: Path | None = None,
    min_stage_s: float = 10.0,
    grace_s: float = 10.0,
    poll_s: float = 0.2,
    env: Mapping[str, str] | None = None,
) -> tuple[list[StageResult], str | None]:
    """Run ``stages`` in order within ``budget_s`` seconds in all (each child with ``env``, or
    this process's environment when None).

    Returns:
        One result per stage, in order, and the name of the signal that stopped the run (None
        when it ran to its end).
    """
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + budget_s
    state = _Signals()
    results: list[StageResult] = []
    with _stop_on_signals(state):
        for i, stage in enumerate(stages):
            result = StageResult(stage.name, stage.what, NOT_RUN)
            results.append(result)
            if state.received is not None:
                result.note = f"the run was stopped by {state.names[state.received]}"
                continue
            if stage.skip:
                result.status, result.note = SKIPPED, stage.skip
                continue
            weights = [s.weight for s in stages[i:] if not s.skip]
            share = _share(deadline - time.monotonic(), weights)
            if share < min_stage_s:
                result.note = f"budget spent ({max(share, 0):.0f} s left for it)"
                continue
            result.log = f"logs/{stage.name}.log"
            _run_one(stage, result, out / result.log, share, state, cwd, grace_s, poll_s, env)
    stopped = None if state.received is None else state.names[state.received]
    return results, stopped


def _run_one(
    stage: Stage,
    result: StageResult,
    log_path: Path,
    share: float,
    state: _Signals,
    cwd: Path | None,
    grace_s: float,
    poll_s: float,
    env: Mapping[str, str] | None = None,
) -> None:
    log.info("gpu-report: stage %s (up to %.0f s): %s", stage.name, share, stage.what)
    began = time.monotonic()
    with log_path.open("w") as fh:
        fh.write(f"$ {' '.join(stage.argv)}\n")
        fh.flush()
        proc = subprocess.Popen(
            stage.argv,
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=None if env is None else dict(env),
            start_new_session=True,
        )
        while True:
            try:
                result.returncode = proc.wait(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.monotonic() - began
            if state.received is not None or elapsed > share:
                kill_group(proc, grace_s=grace_s)
                result.returncode = proc.returncode
                if state.received is not None:
                    result.status = STOPPED
                    result.note = f"stopped by {state.names[state.received]} after {elapsed:.0f} s"
                else:
                    result.status = TIMED_OUT
                    result.note = f"killed at its budget share, {share:.0f} s"
                break
    result.seconds = time.monotonic() - began
    if result.status == NOT_RUN:
        result.status = DONE if result.returncode == 0 else FAILED
        if result.status == FAILED:
            result.note = f"exit status {result.returncode}; see {result.log}"
    log.info("gpu-report: stage %s %s in %.0f s", stage.name, result.status, result.seconds)
