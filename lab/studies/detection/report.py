"""The detection study's pages, rebuilt from its committed run records alone.

``report [PAGE ...]`` rewrites ``docs/results/<PAGE>.{md,csv}``, ``_runs.csv`` and
``_curves.csv`` from the records under ``docs/results/detection/runs/<experiment>/`` and, for
the cost columns, the timings kept in ``docs/results/detection/costs.json`` (``detection.costs``).
``PAGES`` is the report spec: per page, the runs it shows (experiment, variants, seeds, in table
order; one without a record is "not run") and its layout (the study's table, or a grid's).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lab.results.records import RESULTS, RunResult, study_runs_dir
from lab.studies.detection.costs import costs_file, read_costs
from lab.studies.detection.sensitivity import GridPoint
from lab.studies.detection.study import HEADINGS, STUDY, grid_runs
from lab.studies.detection.tables import write
from lab.studies.detection.variants import STUDY_VARIANTS
from lab.studies.sweep import report


@dataclass(frozen=True)
class Page:
    """One page of the study: the runs it shows and how.

    Attributes:
        experiment: the runs' ``train.py --experiment`` (their record's ``experiment``).
        seeds: the seeds shown, per variant.
        variants: the variants in table order (a grid page makes its own from ``grid``).
        grid: ``sensitivity`` or ``ablation``: a grid around ``centre`` (``detection.study``).
        centre: the optimization variant a grid varies.
        label: the title of the variant column (the sweep CLI's pages say ``backend``).
        costs: whether the cost columns (``costs.json``) are shown.
    """

    experiment: str
    seeds: tuple[int, ...]
    variants: tuple[str, ...] = ()
    grid: str | None = None
    centre: str | None = None
    label: str = "variant"
    costs: bool = False


PAGES: dict[str, Page] = {
    "detection_runs": Page("detection_report", (0, 1, 2, 3, 4), STUDY_VARIANTS, costs=True),
    "detection_sensitivity": Page(
        "detection_report", (0, 1, 2), grid="sensitivity", centre="optimization_decoder_self"
    ),
    "detection_ablation": Page(
        "detection_ablation", (0, 1), grid="ablation", centre="optimization_decoder_cross"
    ),
    "detection_ablation_softmax": Page("detection_ablation", (0, 1), ("softmax",)),
    "detection_long": Page(
        "detection_long", (0, 1, 2), ("optimization_encoder_self", "softmax_no_qk_encoder_self")
    ),
    "detection_budget_4000": Page("detection-budget-4000", (0,), ("softmax",), label="backend"),
    "detection_budget_8000": Page("detection-budget-8000", (0,), ("softmax",), label="backend"),
    "detection_cross_keys": Page("detection-cross-keys", (0,), ("optimization_decoder_cross",)),
    "detection_cross_keys_qk": Page(
        "detection-cross-keys-qk", (0, 1), ("optimization_decoder_cross",)
    ),
}


def write_page(
    name: str, *, runs_dir: Path | None = None, out_dir: Path = RESULTS
) -> list[RunResult]:
    """Rebuild page ``name`` of ``PAGES`` from the records under ``runs_dir`` (default the
    study's committed ones) into ``out_dir``, with the committed costs
    (``docs/results/detection/costs.json``); returns its runs. ValueError naming the pages."""
    if name not in PAGES:
        raise ValueError(f"no detection page {name!r}; allowed: {', '.join(PAGES)}")
    page = PAGES[name]
    names, heading = list(page.variants), ""
    grid: list[GridPoint] = []
    if page.grid is not None and page.centre is not None:  # a grid's points, then its control
        grid, control = grid_runs(page.grid, page.centre)
        names, heading = [point.variant.name for point in grid] + control, HEADINGS[page.grid]
    jobs = [(variant, seed) for variant in names for seed in page.seeds]
    runs = report([(runs_dir or study_runs_dir(STUDY)) / page.experiment], jobs)
    out = out_dir / name
    command = f"python -m lab.studies.detection report {name}"
    measured = read_costs(costs_file(RESULTS)) if page.costs else {}
    shown = {v: measured[v] for v in dict.fromkeys(r.variant for r in runs) if v in measured}
    write(out, runs, shown, command=command, label=page.label, grid=grid, heading=heading)
    return runs
