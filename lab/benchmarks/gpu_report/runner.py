"""Run the report's stages one after another, each in its own process, within one budget.

A stage is a command line with an estimated cost and a timeout. Each runs in a child process of
its own session (so the whole group can be killed), its stdout and stderr going to
``<out>/logs/<stage>.log``. Stages run in the plan's order (of value); one whose estimate does not
fit in what is left of the budget is not started (a cheaper one after it still may be), and one
runs for at most ``min(timeout_s, what is left)``: past it, its group is sent SIGTERM, then
SIGKILL after ``grace_s``, so one hung autotune cannot eat the lease. After each stage
``after(results)`` runs (the caller writes its page there), so a run killed from outside keeps
what its finished stages measured.

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
from collections.abc import Callable, Iterator, Mapping, Sequence
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
        estimate_s: what it is expected to take (start-up and compilation included): it is not
            started when less than this is left.
        timeout_s: the most it may run (its group is killed past it).
        skip: why it is not run on this machine (None: run it).
    """

    name: str
    what: str
    argv: tuple[str, ...]
    estimate_s: float = 10.0
    timeout_s: float = 60.0
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


def run_stages(
    stages: Sequence[Stage],
    *,
    budget_s: float,
    out: Path,
    cwd: Path | None = None,
    grace_s: float = 10.0,
    poll_s: float = 0.2,
    env: Mapping[str, str] | None = None,
    after: Callable[[Sequence[StageResult]], None] | None = None,
) -> tuple[list[StageResult], str | None]:
    """Run ``stages`` in order within ``budget_s`` seconds in all (each child with ``env``, or
    this process's environment when None), calling ``after`` with the results so far after
    each stage that ran.

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
        for stage in stages:
            result = StageResult(stage.name, stage.what, NOT_RUN)
            results.append(result)
            if state.received is not None:
                result.note = f"the run was stopped by {state.names[state.received]}"
                continue
            if stage.skip:
                result.status, result.note = SKIPPED, stage.skip
                continue
            left = deadline - time.monotonic()
            if stage.estimate_s > left:
                result.note = (
                    f"would not fit: est. {stage.estimate_s:.0f} s, {max(left, 0):.0f} s left"
                )
                continue
            limit = min(stage.timeout_s, left)
            result.log = f"logs/{stage.name}.log"
            _run_one(stage, result, out / result.log, limit, state, cwd, grace_s, poll_s, env)
            if left < stage.timeout_s and result.status == TIMED_OUT:
                result.note = f"killed at the end of the budget, {limit:.0f} s"
            if after is not None:
                after(results)
    stopped = None if state.received is None else state.names[state.received]
    return results, stopped


def _run_one(
    stage: Stage,
    result: StageResult,
    log_path: Path,
    limit_s: float,
    state: _Signals,
    cwd: Path | None,
    grace_s: float,
    poll_s: float,
    env: Mapping[str, str] | None = None,
) -> None:
    log.info(
        "gpu-report: stage %s (est. %.0f s, up to %.0f s): %s",
        stage.name,
        stage.estimate_s,
        limit_s,
        stage.what,
    )
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
            if state.received is not None or elapsed > limit_s:
                kill_group(proc, grace_s=grace_s)
                result.returncode = proc.returncode
                if state.received is not None:
                    result.status = STOPPED
                    result.note = f"stopped by {state.names[state.received]} after {elapsed:.0f} s"
                else:
                    result.status = TIMED_OUT
                    result.note = f"killed at its timeout, {limit_s:.0f} s"
                break
    result.seconds = time.monotonic() - began
    if result.status == NOT_RUN:
        result.status = DONE if result.returncode == 0 else FAILED
        if result.status == FAILED:
            result.note = f"exit status {result.returncode}; see {result.log}"
    log.info("gpu-report: stage %s %s in %.0f s", stage.name, result.status, result.seconds)
