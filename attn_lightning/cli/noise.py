"""What Lightning and torch print on every run that says nothing about the run, filtered once.

* Lightning 2.6's "💡 Tip: ... try installing litlogger" on every start (an advertisement);
* torch 2.10+'s FutureWarning that Lightning's own ``utilities/_pytree.py`` still uses
  ``LeafSpec`` (Lightning's to change, nothing a user can act on);
* Lightning's device lines for an accelerator that is not there: ``GPU available: False, used:
  False``, ``TPU available: False, using: 0 TPU cores`` (and ``HPU available: False, …`` where
  lightning-habana adds it). They say nothing on a CPU machine. A line whose accelerator *is*
  available stays, used or not: ``GPU available: True (cuda), used: True`` is where the run
  trains, and ``…, used: False`` (beside Lightning's "GPU available but not used" warning) is a
  GPU the run leaves idle, which a user may not have meant;
* ``Checkpoint directory … exists and is not empty`` when a fit resumes from a checkpoint in the
  very folder it writes to (``quiet_own_resume``): that folder holds the run being resumed, so
  the warning is true on every resume and says nothing. Resumed into any other non-empty folder,
  it stays (checkpoints of two runs would mix there).

Everything else Lightning says (restored checkpoints, warnings about the run) stays.
The model table is replaced by one line (``progress.ModelLine``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from pathlib import Path

# Lightning's rank-zero messages come through this logger (``rank_zero_info``).
RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
PYTREE_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"
# ``trainer.setup._log_device_info``: "GPU available: False, used: False", "TPU available: …".
_ABSENT_ACCELERATOR = re.compile(r"[A-Z]PU available: False\b")
# ``ModelCheckpoint.__warn_if_dir_not_empty`` (Lightning 2.6), before the folder's name.
NOT_EMPTY_WARNING = "Checkpoint directory "
# ``--ckpt_path`` values Lightning resolves itself (no file path to compare).
_SPECIAL_CKPT_PATHS = ("best", "last", "hpc", "registry")


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
    if not ckpt_path or str(ckpt_path) in _SPECIAL_CKPT_PATHS:
        return
    folder = Path(ckpt_path).parent
    real = os.path.realpath(folder)
    spellings = {str(folder), os.path.abspath(folder), real}
    with contextlib.suppress(ValueError):  # another drive (Windows): no relative spelling
        spellings.add(os.path.relpath(real))
    names = "|".join(re.escape(s) for s in sorted(spellings))
    message = rf"{re.escape(NOT_EMPTY_WARNING)}(?:{names}) exists and is not empty\.$"
    warnings.filterwarnings("ignore", message=message, category=UserWarning)
