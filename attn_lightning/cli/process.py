"""What a CLI call sets for its whole process: torch's CPU threads, ``--debug``'s NaN/inf check,
and the filters on what Lightning and torch print on every run.

**Threads** (``--threads N``): by default half the CPUs this process may run on (at least 1), or
``OMP_NUM_THREADS`` when it is set. torch's own default is one thread per core; on shared cores a
thread that waits for a busy core holds back every parallel operation with it (the README's
Quickstart ran many times slower on 2 cores with 2 threads than with 1). The count is chosen from
the machine alone, never from its load, so a run's arithmetic does not depend on what else ran.

**Debug checks**: a process-wide switch (``attention.set_check_finite``) plus an environment
variable for the processes DDP spawns. ``cli.main`` also runs in-process (studies, tests), so a
``--debug`` run restores both once it is over.

**Noise** filtered once: Lightning's "💡 Tip: ... litlogger" advertisement; torch 2.10+'s
FutureWarning about Lightning's own ``LeafSpec`` use; Lightning's device lines for an accelerator
that is not there (``GPU available: False, used: False``; a line whose accelerator *is* available
stays, used or not); and ``Checkpoint directory … exists and is not empty`` when a fit resumes
from a checkpoint in the very folder it writes to (``quiet_own_resume``: true on every resume;
resumed into any other non-empty folder, it stays). Everything else Lightning says stays; the
model table is replaced by one line (``progress.ModelLine``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from attn_lightning.attention import set_check_finite
from attn_lightning.attention.base import CHECK_FINITE_ENV, check_finite_enabled
from attn_lightning.cli.run_folders import NAMED_CHECKPOINTS

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


def enable_debug_checks() -> None:
    """Name the tensor and position of the first NaN/inf an attention layer gets, from now on."""
    set_check_finite(True)
    os.environ[CHECK_FINITE_ENV] = "1"  # for processes DDP spawns (they re-import)


@contextlib.contextmanager
def debug_checks(enabled: bool) -> Iterator[None]:
    """``enable_debug_checks`` inside the block when ``enabled``, then the switch and the
    environment variable as they were before (nothing changes when not ``enabled``)."""
    if not enabled:
        yield
        return
    switch, variable = check_finite_enabled(), os.environ.get(CHECK_FINITE_ENV)
    enable_debug_checks()
    try:
        yield
    finally:
        set_check_finite(switch)
        if variable is None:
            os.environ.pop(CHECK_FINITE_ENV, None)
        else:
            os.environ[CHECK_FINITE_ENV] = variable


# Lightning's rank-zero messages come through this logger (``rank_zero_info``).
RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
PYTREE_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
# ``trainer.setup._log_device_info``: "GPU available: False, used: False", "TPU available: …".
_ABSENT_ACCELERATOR = re.compile(r"[A-Z]PU available: False\b")
# ``ModelCheckpoint.__warn_if_dir_not_empty`` (Lightning 2.6), before the folder's name.
NOT_EMPTY_WARNING = "Checkpoint directory "


class _DropNoise(logging.Filter):
    """Drops Lightning's "💡 Tip:" advertisements and its lines about absent accelerators."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = str(record.getMessage()).lstrip()
        return not (message.startswith("💡 Tip:") or _ABSENT_ACCELERATOR.match(message))


_NOISE = _DropNoise()


def quiet() -> None:
    """Install the filters (idempotent)."""
    logger = logging.getLogger(RANK_ZERO_LOGGER)
    if _NOISE not in logger.filters:
        logger.addFilter(_NOISE)
    warnings.filterwarnings("ignore", message=PYTREE_WARNING, category=FutureWarning)


def quiet_own_resume(ckpt_path: str | os.PathLike[str] | None) -> None:
    """Silence "Checkpoint directory <folder> exists and is not empty" for the folder that holds
    ``ckpt_path``: a fit resumed from it writes there, and finds its own run in it.

    The filter names that folder only (as given, absolute, resolved and relative to the working
    directory: Lightning prints the checkpoint folder as the callback composed it), so the
    warning about any other folder still shows. Nothing for no path or Lightning's own
    ``best``/``last``/``hpc``/``registry``.
    """
    if not ckpt_path or str(ckpt_path) in NAMED_CHECKPOINTS:
        return
    folder = Path(ckpt_path).parent
    real = os.path.realpath(folder)
    spellings = {str(folder), os.path.abspath(folder), real}
    with contextlib.suppress(ValueError):  # another drive (Windows): no relative spelling
        spellings.add(os.path.relpath(real))
    names = "|".join(re.escape(s) for s in sorted(spellings))
    message = rf"{re.escape(NOT_EMPTY_WARNING)}(?:{names}) exists and is not empty\.$"
    warnings.filterwarnings("ignore", message=message, category=UserWarning)
