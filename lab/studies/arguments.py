"""The command-line pieces the studies share: a study's parser, its run flags and plans.

Every study that trains runs through ``studies.runner``, so ``add_run_arguments`` gives its flags
one meaning everywhere; ``plan_argv`` reads a plan (``configs/studies/<study>.yaml``) as the
arguments it stands for.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml


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


def add_out(parser: argparse.ArgumentParser, *, required: bool = True) -> None:
    """``--out``: the tables' path without extension."""
    parser.add_argument("--out", required=required, type=Path, help="output path without extension")


def add_run_arguments(
    parser: argparse.ArgumentParser,
    *,
    experiment: str | None,
    experiment_help: str,
    out_required: bool = True,
) -> None:
    """``--seeds --set --jobs --resume --skip-runs --experiment --out`` (``experiment``: the
    default of ``--experiment``)."""
    add_seeds(parser)
    add_overrides(parser)
    parser.add_argument("--jobs", type=int, default=1, help="training runs at once")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="reuse a run's ok record where it exists, continue a stopped run from its "
        "last.ckpt, train the others",
    )
    parser.add_argument(
        "--skip-runs", action="store_true", help="train nothing: tables from the records there are"
    )
    add_experiment(parser, experiment, experiment_help)
    add_out(parser, required=out_required)


def check_overrides(parser: argparse.ArgumentParser, overrides: Sequence[str]) -> None:
    """Exit with a usage error naming any ``--set`` value that is not ``KEY=VALUE``."""
    bad = [o for o in overrides if "=" not in o]
    if bad:
        parser.error(f"--set expects KEY=VALUE, got {bad}")


def plan_argv(
    parser: argparse.ArgumentParser,
    path: Path,
    *,
    exclude: Sequence[str] = (),
    sections: Sequence[str] = (),
) -> tuple[list[str], dict[str, Any]]:
    """The command-line arguments a plan file stands for, checked by key, and its sections.

    A plan maps ``parser``'s long option names (without ``--``) to values: a list for an option
    that takes several or repeats (``pair``: a list of pairs), ``true``/``false`` for a flag.
    ``parser`` then parses them, so a plan is checked as its command line is. ``exclude``:
    options a plan may not set (``plan`` itself, modes of one call); ``sections``: keys that are
    no option (the sweep's ``pages``), returned as they are.

    Raises:
        ValueError: naming ``path`` when it is not a mapping, a key that is no option (with the
            allowed keys), or a flag that is not true/false.
    """
    plan = yaml.safe_load(path.read_text()) if path.is_file() else None
    if not isinstance(plan, dict):
        raise ValueError(f"plan {path} is not a YAML mapping of option names to values")
    options: dict[str, argparse.Action] = {}
    for action in parser._actions:
        names = [o for o in action.option_strings if o.startswith("--")]
        if names and names[0][2:] not in ("help", *exclude):
            options[names[0][2:]] = action
    argv: list[str] = []
    found = {key: plan.pop(key) for key in sections if key in plan}
    for key, value in plan.items():
        if key not in options:
            allowed = ", ".join(sorted([*options, *sections]))
            raise ValueError(f"plan {path}: unknown key {key!r}; the keys are {allowed}")
        flag, action = f"--{key}", options[key]
        if action.nargs == 0:  # store_true
            if not isinstance(value, bool):
                raise ValueError(f"plan {path}: {key} is a flag, give true or false, not {value!r}")
            argv += [flag] if value else []
        elif isinstance(action, argparse._AppendAction):
            for item in value if isinstance(value, list) else [value]:
                argv += [flag, *map(str, item if isinstance(item, list) else [item])]
        else:
            argv += [flag, *map(str, value if isinstance(value, list) else [value])]
    return argv, found


def log_to_stderr() -> None:
    """A study's progress lines: plain messages at INFO on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
