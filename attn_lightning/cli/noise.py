"""What Lightning and torch print on every run that says nothing about the run, filtered once.

* Lightning 2.6's "💡 Tip: ... try installing litlogger" on every start (an advertisement);
* torch 2.10+'s FutureWarning that Lightning's own ``utilities/_pytree.py`` still uses
  ``LeafSpec`` (Lightning's to change, nothing a user can act on).

Everything else Lightning says (devices, restored checkpoints, warnings about the run) stays.
The model table is replaced by one line (``progress.ModelLine``).
"""

from __future__ import annotations

import logging
import warnings

# Lightning's rank-zero messages come through this logger (``rank_zero_info``).
RANK_ZERO_LOGGER = "lightning.pytorch.utilities.rank_zero"
PYTREE_WARNING = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _DropTips(logging.Filter):
    """Drops Lightning's "💡 Tip:" advertisements."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.getMessage()).lstrip().startswith("💡 Tip:")


_TIPS = _DropTips()


def quiet() -> None:
    """Install the filters (idempotent)."""
    logger = logging.getLogger(RANK_ZERO_LOGGER)
    if _TIPS not in logger.filters:
        logger.addFilter(_TIPS)
    warnings.filterwarnings("ignore", message=PYTREE_WARNING, category=FutureWarning)
