"""A plan file's reading (the grammar is in ``studies.sweep``'s docstring): its options as the
command line they stand for, its sections apart, and its ``pages:`` checked against the report
kinds."""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

# A call's own options: no plan sets them, and the page's command omits report-only and into.
CALL_ONLY = ("plan", "report-only", "into", "dry-run")
SECTIONS = ("grid", "stages", "pages", "select")  # a plan's keys that are no option


def plan_argv(parser: argparse.ArgumentParser, path: Path) -> tuple[list[str], dict[str, Any]]:
    """The arguments a plan file stands for (its keys: ``parser``'s long options but
    ``CALL_ONLY``; a list for an option that takes several or repeats, true/false for a flag), so
    a plan is checked as its command line is, and its ``SECTIONS`` as they are. ValueError: a
    plan that is not a mapping, a key that is no option (naming the keys), a flag not a bool."""
    plan = yaml.safe_load(path.read_text()) if path.is_file() else None
    if not isinstance(plan, dict):
        raise ValueError(f"plan {path} is not a YAML mapping of option names to values")
    options: dict[str, argparse.Action] = {}
    for action in parser._actions:
        names = [o for o in action.option_strings if o.startswith("--")]
        if names and names[0][2:] not in ("help", *CALL_ONLY):
            options[names[0][2:]] = action
    argv: list[str] = []
    found = {key: plan.pop(key) for key in SECTIONS if key in plan}
    for key, value in plan.items():
        if key not in options:
            allowed = ", ".join(sorted([*options, *SECTIONS]))
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


@dataclass(frozen=True)
class Page:
    """A page of a plan's ``pages:`` section: its name, writer, record folders and options."""

    name: str
    write: Callable[..., object]
    runs: list[Path]
    options: dict[str, Any]


def plan_pages(
    pages: object, out: Path, reports: Mapping[str, Callable[..., object]]
) -> list[Page]:
    """A plan's ``pages:`` section, checked (default records: ``<out>/runs``); a ValueError
    names the page and the report kind or option that is not one there is."""
    if not isinstance(pages, dict) or not all(isinstance(s, dict) for s in pages.values()):
        raise ValueError("pages: give a mapping of page names to {report: KIND, option: value}")
    checked = []
    for name, spec in pages.items():
        options = dict(spec)
        kind = options.pop("report", None)
        if kind not in reports:
            raise ValueError(f"pages: {name}: report {kind!r}; the reports are {list(reports)}")
        write = reports[kind]
        runs = options.pop("runs", [out / "runs"])
        runs = [runs] if isinstance(runs, str) else runs  # one folder, not its characters
        keys = inspect.signature(write).parameters.values()  # its options: keyword-only
        allowed = [k.name for k in keys if k.kind == k.KEYWORD_ONLY and k.name != "command"]
        if (unknown := next((key for key in options if key not in allowed), None)) is not None:
            raise ValueError(
                f"pages: {name}: unknown key {unknown!r}; the keys of a {kind} page are "
                f"report, runs, {', '.join(allowed)}"
            )
        checked.append(Page(str(name), write, [Path(r) for r in runs], options))
    return checked
