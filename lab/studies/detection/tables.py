"""The detection study's tables (``write``): ``results.tables.write_tables`` with the costs
(``detection.costs``), the controls (``detection.variants``) and a grid's own table
(``detection.sensitivity``), under the machine line of the runs' own records.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from lab.results.curves import append_curves
from lab.results.records import RunResult
from lab.results.tables import column, write_tables
from lab.studies.detection.sensitivity import (
    KEYS90,
    GridPoint,
    grid_table,
    optimization_sites,
    sensitivity_cells,
    title,
)
from lab.studies.detection.variants import COMPARED, comparisons

METRICS = ("test/mAP", "test/AP50", "test/AP75", "val/mAP")
CURVE = "val/mAP"  # <out>_curves.csv: every validation of every run (results.curves)
log = logging.getLogger("lab.studies.detection")


def write(
    out: Path,
    results: list[RunResult],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
    label: str = "variant",
    grid: Sequence[GridPoint] = (),
    heading: str = "",
) -> None:
    """The study's tables: ``METRICS`` mean ± std per variant, its cost columns and the
    comparison with its control where both ran (``CONTROLS``: the control, what differs, the
    paired-by-seed Δ); ``label`` titles the variant column. With a ``grid``, the summary also
    holds each point's cells and ``<out>.md`` opens with the grid's own table, headed
    ``heading`` (``_grid_head``); ``CURVE`` per run closes it (``results.curves``)."""
    notes = []
    if costs:
        inputs = sorted({str(cost["input"]) for cost in costs.values()})
        notes.append(
            f"Cost columns: one CPU thread, input {', '.join(inputs)}, eval mode, no grad."
        )
    compared = comparisons(results)
    cells = sensitivity_cells(results, grid) if grid else {}
    extra: dict[str, dict[str, Any]] = {}
    for more in (costs, compared, cells):
        for variant, row in more.items():
            extra.setdefault(variant, {}).update((k, x) for k, x in row.items() if k != "input")
    # Every variant gets every column ("–" where it has none): the CSV needs one header.
    titles = list(dict.fromkeys(t for row in extra.values() for t in row))
    shown = dict.fromkeys(r.variant for r in results)
    extra = {v: {t: extra.get(v, {}).get(t) for t in titles} for v in shown}
    if compared:
        notes.append(
            f"Δ vs control: the variant's {column(COMPARED).title} minus its control's, paired "
            "by seed: mean [95 % Student-t interval] (n seeds both finished; one seed: no "
            "interval). The control differs in one thing only (optimization and pool: the "
            "mixing, softmax with the same projections at the same sites; softmax no_qk: the "
            "Q/K matrices)."
        )
    write_tables(
        out,
        results,
        command=command,
        metrics=METRICS,
        label=label,
        jobs=jobs,
        extra=extra,
        notes=notes,
    )
    if grid:
        md = out.with_name(out.name + ".md")
        md.write_text(_grid_head(results, grid, cells, heading) + md.read_text())
    append_curves(out, results, CURVE)
    log.info("wrote %s.md and its CSVs", out)


def _grid_head(
    results: list[RunResult],
    grid: Sequence[GridPoint],
    cells: Mapping[str, Mapping[str, Any]],
    heading: str,
) -> str:
    # The grid (its options, test mAP mean ± std (n), AP50, AP75, the paired Δ vs the
    # variant's own point, keys90 where reported), then the page's summary and per-run tables.
    own = grid[0]
    point = ", ".join(f"{title(o)} = {v}" for o, v in own.options.items())
    notes = [
        f"Δ vs default: per seed, the point's {column(COMPARED).title} minus that of "
        f"`{own.variant.name}` ({point}) with the same seed; mean [95 % Student-t interval] "
        "(n seeds both finished; one seed: no interval)."
    ]
    if not any(KEYS90 in row for row in cells.values()):
        notes.append(
            f"No {KEYS90} column: the runs' records hold no attention/<layer>/{KEYS90} "
            "(AttentionDiagnostics logs it for optimization layers only)."
        )
    where = ", ".join(f"`{site}`" for site in optimization_sites(own.variant.name))
    head = [
        f"# {heading}: `{own.variant.name}` ({where})",
        "",
        grid_table(results, grid, cells),
        *(f"\n{note}" for note in notes),
        "",
        "## All columns and runs",
        "",
    ]
    return "\n".join(head) + "\n"
