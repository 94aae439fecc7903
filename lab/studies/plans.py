"""A plan file read: its options as the command line they stand for (``plan_argv``), its report
kinds (``REPORTS``) and its ``pages:`` section checked into ``Page`` objects.

A report kind is a plain function ``write(record folders, out, *, command, **options)``: it reads
the run records under the folders and writes ``<out>.md`` and its CSVs; ``command`` is the page's
"Regenerate with" line and ``options`` are the page's other keys (``studies.sweep``'s docstring).
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.results.paired import write_paired
from lab.studies.detection.report import write_page as write_detection
from lab.studies.detection.report import write_probe, write_sites
from lab.studies.lora.report import report as lora_report
from lab.studies.reversal import report as reversal_report
from lab.studies.trajectories import write_trajectories
from lab.studies.warm_start.tables import write as write_warm_start


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


Report = Callable[..., object]
REPORTS: dict[str, Report] = {
    "detection": write_detection,  # table, controls, costs, grids
    "detection_probe": write_probe,
    "detection_sites": write_sites,
    "lora": lora_report,  # the student's table, learning rates chosen on validation
    "paired": write_paired,  # unimodal: mean ± std, Δ
    "reversal": reversal_report,
    "trajectories": write_trajectories,
    "warm_start": write_warm_start,  # its conditions per backend, warm start vs scratch
}


@dataclass(frozen=True)
class Page:
    """A page of a plan's ``pages:`` section: its name, writer, record folders and options."""

    name: str
    write: Report
    runs: list[Path]
    options: dict[str, Any]


def _unknown(write: Report, options: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The first of ``options`` that ``write`` does not take (or None), and those it takes."""
    keys = inspect.signature(write).parameters.values()
    allowed = [k.name for k in keys if k.kind == k.KEYWORD_ONLY and k.name != "command"]
    return next((key for key in options if key not in allowed), None), allowed


def plan_pages(pages: object, out: Path) -> list[Page]:
    """A plan's ``pages:`` section, checked; ``out``: the sweep's ``--out`` (default records:
    ``<out>/runs``).

    Raises:
        ValueError: naming the page and key when a report kind or option is not one there is.
    """
    if not isinstance(pages, dict) or not all(isinstance(s, dict) for s in pages.values()):
        raise ValueError("pages: give a mapping of page names to {report: KIND, option: value}")
    checked = []
    for name, spec in pages.items():
        options = dict(spec)
        kind = options.pop("report", None)
        if kind not in REPORTS:
            raise ValueError(f"pages: {name}: report {kind!r}; the reports are {list(REPORTS)}")
        write = REPORTS[kind]
        runs = options.pop("runs", [out / "runs"])
        runs = [runs] if isinstance(runs, str) else runs  # one folder, not its characters
        unknown, allowed = _unknown(write, options)
        if unknown is not None:
            raise ValueError(
                f"pages: {name}: unknown key {unknown!r}; the keys of a {kind} page are "
                f"report, runs, {', '.join(allowed)}"
            )
        checked.append(Page(str(name), write, [Path(r) for r in runs], options))
    return checked
