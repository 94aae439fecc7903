"""The detection study's report kinds: what a plan's ``pages:`` section names (``sweep.REPORTS``).

The study is the plans ``configs/studies/detection*.yaml``, run by the sweep; these write their
pages from the runs' records, each ``(record folders, out, *, command, **the page's options)``:

* ``detection`` (``write_page``): the study's table (``detection.tables``) over ``variants`` ×
  ``seeds``, or with ``grid: sensitivity | ablation`` the grid around ``centre``
  (``detection.sensitivity``) and its control; ``costs:`` a ``costs.json`` adds the cost
  columns (``detection.costs``; a variant it lacks is measured once and added to it);
* ``detection_probe`` (``write_probe``): the decoder cross-attention statistics of trained runs
  (``detection.probe``), kept per run as ``probe.csv`` beside its record;
* ``detection_sites`` (``write_sites``): parameters and counted FLOPs per site of each variant's
  untrained model (``detection.costs``): counts of the configs, no timing, so no machine line.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attn_lightning.records import markdown_records, write_csv
from lab.results.records import NOT_RUN, RunResult, load_runs
from lab.studies.detection import costs, probe
from lab.studies.detection.sensitivity import ABLATIONS, GRID, GridPoint, sensitivity_grid
from lab.studies.detection.tables import write
from lab.studies.detection.variants import CONTROLS, overlays

# A grid page's options and heading: ``grid: sensitivity`` or ``grid: ablation``.
GRIDS = {
    "sensitivity": (GRID, "Sensitivity of optimization attention"),
    "ablation": (
        ABLATIONS,
        "Ablation of optimization attention: one ingredient of the paper's form swapped at a time",
    ),
}


def grid_points(grid: str, centre: str) -> tuple[list[GridPoint], list[str]]:
    """The points of ``grid`` (``GRIDS``) around ``centre`` and the variants its table shows
    after them: an ablation's control at the same budget. ValueError naming what is allowed."""
    if grid not in GRIDS:
        raise ValueError(f"grid {grid!r}; allowed: {', '.join(GRIDS)}")
    points = sensitivity_grid(centre, grid=GRIDS[grid][0])
    return points, [CONTROLS[centre]] if grid == "ablation" and centre in CONTROLS else []


def runs_of(roots: Sequence[Path], names: Sequence[str], seeds: Sequence[int]) -> list[RunResult]:
    """The runs of ``names`` × ``seeds`` from the records under ``roots`` (the first folder's
    where two hold one), in that order; one without a record is ``NOT_RUN``."""
    found = {(r.variant, r.seed): r for root in reversed(roots) for r in load_runs(root)}
    jobs = [(name, seed) for name in names for seed in seeds]
    return [found.get(job) or RunResult(job[0], job[1], None, NOT_RUN) for job in jobs]


def write_page(
    runs: Sequence[Path],
    out: Path,
    *,
    command: str,
    seeds: Sequence[int],
    variants: Sequence[str] = (),
    grid: str | None = None,
    centre: str | None = None,
    label: str = "variant",
    costs: str | None = None,
) -> list[RunResult]:
    """The ``detection`` page kind (module docstring); returns its runs in table order."""
    names, heading = list(variants), ""
    points: list[GridPoint] = []
    if grid is not None:
        if centre is None:
            raise ValueError(f"a {grid} page needs centre: an optimization variant")
        points, control = grid_points(grid, centre)
        names, heading = [p.variant.name for p in points] + control, GRIDS[grid][1]
    if not names:
        raise ValueError("give variants: [...] or grid: sensitivity | ablation with a centre")
    results = runs_of(runs, names, seeds)
    measured = {} if costs is None else _costs(Path(costs), names, command=command)
    write(out, results, measured, command=command, label=label, grid=points, heading=heading)
    return results


def _costs(path: Path, names: Sequence[str], *, command: str) -> dict[str, dict[str, Any]]:
    # A timing belongs to the machine that made it: kept in the file, measured only when absent.
    kept = costs.read_costs(path)
    missing = [name for name in names if name not in kept]
    if missing:
        torch.set_num_threads(1)
        new = {
            v.name: costs.measure(v, overrides=(), batch=8, repeats=20) for v in overlays(missing)
        }
        costs.write_costs(path, new, command=command)
        kept = costs.read_costs(path)
    return {name: kept[name] for name in names}


def write_probe(
    runs: Sequence[Path],
    out: Path,
    *,
    command: str,
    variants: Sequence[str],
    seeds: Sequence[int],
    batches: int = 4,
) -> list[dict[str, Any]]:
    """The ``detection_probe`` page kind: ``<out>.md`` and ``<out>.csv`` of ``probe.STATS`` per
    decoder layer of each run; returns the rows. A run's rows are its ``probe.csv``, measured from
    its best checkpoint the first time (``probe.probe_run``). FileNotFoundError naming a run
    with neither."""
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    rows = [
        row
        for variant in variants
        for seed in seeds
        for row in probe.run_rows(runs, variant, seed, batches=batches)
    ]
    write_csv(out.with_name(out.name + ".csv"), rows, {"command": command}, float_digits=6)
    text = (
        "# Decoder cross-attention weights of trained DETR runs\n\n"
        f"```bash\n{command}\n```\n\n{markdown_records(rows)}\n\n"
        f"Validation split, {batches} batches, best checkpoint of each run. "
        "Definitions: `lab/studies/detection/probe.py`.\n"
    )
    out.with_name(out.name + ".md").write_text(text)
    return rows


def write_sites(runs: Sequence[Path], out: Path, *, command: str, variants: Sequence[str]) -> None:
    """The ``detection_sites`` page kind: ``<out>.md`` and ``<out>.csv`` (``costs.write_sites``)
    of ``variants`` (names of ``configs/detection/``); ``runs`` is not read."""
    del runs  # counted from the configs: no run is needed
    costs.write_sites(out, costs.site_costs(overlays(variants)), command=command)
