"""``train.py``'s entry: the CLI with configuration and input errors as one line."""

from __future__ import annotations

import logging
import signal
import sys
from typing import Any

from lightning.pytorch.utilities.exceptions import MisconfigurationException, SIGTERMException
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from attn_lightning.callbacks import NonFiniteTraining, RunCheckpoint
from attn_lightning.callbacks.exports import destroy_process_group
from attn_lightning.cli.app import main
from attn_lightning.cli.config_checks import HINT, answer_first_mistakes, debug_requested
from attn_lightning.cli.errors import one_line, trainer_error
from attn_lightning.cli.progress import RunStarted

log = logging.getLogger("attn_lightning")

DIVERGED = 3  # the exit status of a run stopped by NonFiniteStop


def command_line(args: list[str] | None = None) -> None:
    """``train.py``: ``main`` with configuration and input errors as one ``error:`` line.

    A ValueError, FileNotFoundError or NotImplementedError raised before the run starts (an
    unknown backend or option, a wrong type, missing data files, a bad checkpoint, a class
    mismatch, a trainer option Lightning refuses: ``errors.trainer_error``) or Lightning's
    MisconfigurationException at setup prints ``error: …`` and a hint and exits 2; ``--debug``
    or ``ATTN_LIGHTNING_DEBUG=1`` keeps the traceback. Errors once training has started keep
    theirs. A run stopped by Ctrl-C or SIGTERM (after saving ``last.ckpt``) exits 130 or 143; one
    stopped by non-finite losses (``callbacks.NonFiniteStop``) prints its one line and exits 3.
    """
    argv = sys.argv[1:] if args is None else args
    answer_first_mistakes(argv)  # as train.py does before importing this module
    if not log.handlers:  # progress lines and the end-of-run summary, on stderr
        handler = StderrHandler()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False
    RunStarted.started = False
    try:
        main(args)
    except (ValueError, FileNotFoundError, NotImplementedError) as error:
        if RunStarted.started or debug_requested(argv):
            raise
        sys.stderr.write(f"error: {one_line(error)}\n{HINT}\n")
        raise SystemExit(2) from None
    except MisconfigurationException as error:
        # Lightning refusing the configuration at fit/validate/... setup, before the first step.
        if RunStarted.started or debug_requested(argv):
            raise
        sys.stderr.write(f"error: {trainer_error(error, {})}\n{HINT}\n")
        raise SystemExit(2) from None
    except NonFiniteTraining as error:
        # NonFiniteStop said what happened and where the last finite weights are: one line.
        if debug_requested(argv):
            raise
        if _rank_zero():  # every DDP rank stops (and exits 3) together; one says so
            sys.stderr.write(f"error: {error}\n")
        raise SystemExit(DIVERGED) from None
    except SIGTERMException:
        # Stopped at a step's end by Ctrl-C or SIGTERM (RunCheckpoint said where it saved). A
        # SystemExit without a code would exit 0, as if the run had finished: 128 + the signal.
        stop = signal.SIGINT if RunCheckpoint.last_stop == "Ctrl-C" else signal.SIGTERM
        raise SystemExit(128 + stop) from None
    finally:
        # Lightning leaves the DDP group open after fit (``exports.close_process_group_at_exit``).
        destroy_process_group()


class StderrHandler(logging.StreamHandler):
    """A handler writing to ``sys.stderr`` as it is when a line is logged: a handler that kept
    the stream of its creation writes into a closed one once tests or tools have swapped it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass  # always sys.stderr


def _rank_zero() -> bool:
    """Whether this process is rank 0 (or the only one)."""
    return getattr(rank_zero_only, "rank", 0) == 0  # set by Lightning for each process
