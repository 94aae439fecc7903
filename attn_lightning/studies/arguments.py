"""The command-line pieces the studies share: a study's parser, its run flags, old spellings.

Every study that trains runs through ``studies.runner`` and so takes the same flags for them:
``--seeds``, ``--set KEY=VALUE`` (a ``train.py`` argument of every run), ``--jobs``, ``--resume``,
``--skip-runs``, ``--experiment`` and ``--out``; ``add_run_arguments`` adds them with one
meaning everywhere. ``renamed`` is the one notice an old spelling (a module path, a flag) gives.
"""

from __future__ import annotations

import argparse
import logging
import warnings
from collections.abc import Sequence
from pathlib import Path


def study_parser(prog: str, description: str | None) -> argparse.ArgumentParser:
    """A study's parser: ``prog`` as its usage name, ``description`` (its docstring) as written."""
    return argparse.ArgumentParser(
        prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )


def add_seeds(parser: argparse.ArgumentParser, default: Sequence[int] = (0, 1, 2)) -> None:
    """``--seeds``: each run's ``seed_everything`` (initialisation, batch order, features)."""
    parser.add_argument("--seeds", nargs="+", type=int, default=list(default))


def add_overrides(parser: argparse.ArgumentParser) -> None:
    """``--set KEY=VALUE`` (repeatable): a ``train.py`` argument of every run."""
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="train.py argument (repeatable)",
    )


def add_experiment(parser: argparse.ArgumentParser, default: str | None, text: str) -> None:
    """``--experiment``: the runs' ``train.py --experiment`` (logs/, checkpoints/, sweeps/)."""
    parser.add_argument("--experiment", default=default, help=text)


def add_out(parser: argparse.ArgumentParser) -> None:
    """``--out`` (required): the tables' path without extension."""
    parser.add_argument("--out", required=True, type=Path, help="output path without extension")


def add_run_arguments(
    parser: argparse.ArgumentParser,
    *,
    experiment: str | None,
    experiment_help: str,
    seeds: Sequence[int] = (0, 1, 2),
) -> None:
    """The flags of a study that trains: ``--seeds --set --jobs --resume --skip-runs
    --experiment --out`` (``experiment``: the default of ``--experiment``)."""
    add_seeds(parser, seeds)
    add_overrides(parser)
    parser.add_argument("--jobs", type=int, default=1, help="training runs at once")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse a run's ok record where it exists, continue a stopped run from its "
        "last.ckpt, train the others",
    )
    parser.add_argument(
        "--skip-runs",
        "--skip_runs",
        action="store_true",
        help="train nothing: tables from the run records that exist",
    )
    add_experiment(parser, experiment, experiment_help)
    add_out(parser)


def check_overrides(parser: argparse.ArgumentParser, overrides: Sequence[str]) -> None:
    """Exit with a usage error naming any ``--set`` value that is not ``KEY=VALUE``."""
    bad = [o for o in overrides if "=" not in o]
    if bad:
        parser.error(f"--set expects KEY=VALUE, got {bad}")


def log_to_stderr() -> None:
    """A study's progress lines: plain messages at INFO on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")


def renamed(old: str, new: str) -> None:
    """The one notice of an old spelling that still works: a ``FutureWarning`` naming the new
    one, attributed to the caller's caller (the line that used the old spelling)."""
    warnings.warn(f"{old} is deprecated; use {new}", FutureWarning, stacklevel=3)
