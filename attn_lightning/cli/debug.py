"""What ``--debug`` turns on for one CLI call: the attention layers' NaN/inf input check.

The check is a process-wide switch (``attention.set_check_finite``) plus an environment variable
for the processes DDP spawns (they re-import the package). A ``train.py`` process ends with its
run, but ``cli.main`` also runs in-process (studies' ``in_process`` runs, tests): there a
``--debug`` run must not leave every later run of the process paying for the check, so the
switch and the variable are restored once the run is over.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from attn_lightning.attention import set_check_finite
from attn_lightning.attention.base import CHECK_FINITE_ENV, check_finite_enabled


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
