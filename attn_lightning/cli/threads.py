"""How many CPU threads torch uses: ``--threads N``, by default half the CPUs this process may run
on (at least 1), or ``OMP_NUM_THREADS`` when it is set.

torch's own default is one thread per core. On a machine whose cores are shared (other jobs, a
laptop's desktop, several runs side by side) a thread that waits for a busy core holds back
every parallel operation with it: on 2 cores with one kept busy the reversal Quickstart ran
many times slower with torch's default 2 threads than with 1 (README, Quickstart). Half the
CPUs leaves room for the rest of the machine and for data loading; on a machine of your own,
``--threads`` set to the number of cores may be faster. The count is chosen from the machine
alone, never from its load, so a run's arithmetic does not depend on what else was running.
"""

from __future__ import annotations

import logging
import os

import torch

log = logging.getLogger("attn_lightning")
OMP_ENV = "OMP_NUM_THREADS"


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def default_threads() -> tuple[int, str]:
    """``(threads, why)``: ``OMP_NUM_THREADS`` when set, else half the usable CPUs (≥ 1)."""
    given = os.environ.get(OMP_ENV, "")
    if given.isdigit() and int(given) > 0:
        return int(given), f"{OMP_ENV}={given}"
    cpus = usable_cpus()
    return max(1, cpus // 2), f"half of {cpus} CPUs; --threads N to change"


def set_threads(threads: int | None) -> int:
    """Set torch's intra-op threads (and ``OMP_NUM_THREADS`` for processes DDP starts, so that
    Lightning does not choose another count there); log the count once; return it.

    Raises:
        ValueError: ``threads`` < 1.
    """
    if threads is not None and threads < 1:
        raise ValueError(f"--threads must be >= 1, got {threads}")
    count, why = (threads, "--threads") if threads is not None else default_threads()
    torch.set_num_threads(count)
    os.environ[OMP_ENV] = str(count)
    if os.environ.get("LOCAL_RANK", "0") == "0":
        log.info("torch CPU threads: %d (%s)", count, why)
    return count
