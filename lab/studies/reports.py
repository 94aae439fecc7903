"""A plan's report kinds (``REPORTS``) and its ``pages:`` section, checked into ``Page`` objects.

A report kind is a plain function ``write(record folders, out, *, command, **options)``: it reads
the run records under the folders and writes ``<out>.md`` and its CSVs; ``command`` is the page's
"Regenerate with" line and ``options`` are the page's other keys (``studies.sweep``'s docstring).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lab.results.paired import write_paired
from lab.studies.detection.report import write_page as write_detection
from lab.studies.detection.report import write_probe, write_sites
from lab.studies.lora.report import report as lora_report
from lab.studies.reversal.report import report as reversal_report
from lab.studies.reversal.trajectories import write_trajectories
from lab.studies.warm_start.tables import write as write_warm_start

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
