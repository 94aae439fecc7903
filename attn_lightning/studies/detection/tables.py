"""The detection study's tables: the variants with their costs and controls, a grid's table.

``write`` is ``results.tables.write_tables`` with the study's metrics (``METRICS``), the cost
columns (``detection.costs``) and, for each variant whose control also ran, the control, what
differs and the paired-by-seed Δ (``detection.variants``). ``write_sensitivity`` opens the same
tables with a grid's own (``detection.sensitivity``). ``write_curves`` adds every run's
validation mAP, read from its record's curves (``results.records.run_curves``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import curves_table
from attn_lightning.results.files import write_csv
from attn_lightning.results.records import OK, RunResult, run_curves
from attn_lightning.results.run_files import load_record
from attn_lightning.results.tables import column, write_tables
from attn_lightning.studies.detection.sensitivity import (
    KEYS90,
    GridPoint,
    grid_table,
    optimization_sites,
    sensitivity_cells,
    title,
)
from attn_lightning.studies.detection.variants import COMPARED, comparisons

METRICS = ("test/mAP", "test/AP50", "test/AP75", "val/mAP")
MACHINE = "machine"  # a converted run's tag: the machine named by the page it was converted from
CURVE = "val/mAP"  # <out>_curves.csv: every validation of every run


def write(
    out: Path,
    results: list[RunResult],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
    cells: Mapping[str, Mapping[str, Any]] | None = None,
    label: str = "variant",
    machine: str | None = None,
) -> None:
    """The study's tables: ``METRICS`` mean ± std per variant, its cost columns, the
    comparison with its control where both ran (``CONTROLS``) and any other per-variant
    ``cells`` (title -> value; the sensitivity grid's); ``label`` titles the variant column,
    ``machine`` is the machine line (default: the runs' own, ``machine_line_of``)."""
    notes = []
    if costs:
        inputs = sorted({str(cost["input"]) for cost in costs.values()})
        notes.append(
            f"Cost columns: one CPU thread, input {', '.join(inputs)}, eval mode, no grad."
        )
    extra = {v: {k: x for k, x in cost.items() if k != "input"} for v, cost in costs.items()}
    compared = comparisons(results)
    for more in (compared, cells or {}):
        for variant, row in more.items():
            extra.setdefault(variant, {}).update(row)
    # Every variant gets every column ("–" where it has none): the CSV needs one header.
    titles = list(dict.fromkeys(t for row in extra.values() for t in row))
    for variant in dict.fromkeys(r.variant for r in results):
        row = extra.setdefault(variant, {})
        extra[variant] = {t: row.get(t) for t in titles}
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
        machine=machine or machine_line_of(results, jobs=jobs),
    )


def write_sensitivity(
    out: Path,
    results: list[RunResult],
    grid: Sequence[GridPoint],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
    heading: str = "Sensitivity of optimization attention",
) -> None:
    """The sensitivity tables: ``<out>.md`` opens with the grid (its options, test mAP
    mean ± std (n), AP50, AP75, the paired Δ vs the variant's own point, keys90 where reported),
    then ``write``'s summary (with the same cells and the costs) and per-run tables; ``<out>.csv``
    is that summary, ``<out>_runs.csv`` one row per run."""
    cells = sensitivity_cells(results, grid)
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
    write(out, results, costs, command=command, jobs=jobs, cells=cells)
    md = out.with_name(out.name + ".md")
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
    md.write_text("\n".join(head) + "\n" + md.read_text())


def _machine(run: RunResult) -> str | None:
    if MACHINE in run.info:
        return str(run.info[MACHINE])
    if run.status != OK or run.log_dir is None:
        return None
    try:
        env = load_record(Path(run.log_dir)).get("environment")
    except (FileNotFoundError, ValueError):
        return None
    if not env:
        return None
    return f"{env['platform']}, {env.get('device_name') or env['device']}, Python {env['python']}"


def machine_line_of(results: Sequence[RunResult], *, jobs: int = 1) -> str | None:
    """``Machine: <platform>, <device>, Python <version>; runs one after another.`` of the
    finished runs, from their records' environment (a converted run: its ``machine`` tag); all
    of them when they ran on several; None (this machine's line) when no run says."""
    machines = list(dict.fromkeys(m for r in results if (m := _machine(r)) is not None))
    if not machines:
        return None
    pace = "runs one after another" if jobs <= 1 else f"{jobs} runs at a time"
    return f"Machine{'s' if len(machines) > 1 else ''}: {'; '.join(machines)}; {pace}."


def curve_rows(results: Sequence[RunResult], tag: str = CURVE) -> list[dict[str, Any]]:
    """``{variant, seed, optimizer_steps, <tag>}`` for every value of ``tag`` in the curves of
    every finished run's record, in the runs' order. A validation is logged at the index of
    the step just taken, so ``optimizer_steps`` is the curve's step + 1."""
    rows = []
    for r in results:
        if r.status != "ok" or r.log_dir is None:
            continue
        for point in run_curves(Path(r.log_dir)):
            if point["tag"] == tag:
                rows.append(
                    {
                        "variant": r.variant,
                        "seed": r.seed,
                        "optimizer_steps": int(point["step"]) + 1,
                        tag: float(point["value"]),
                    }
                )
    return rows


def write_curves(out: Path, results: Sequence[RunResult], tag: str = CURVE) -> None:
    """``<out>_curves.csv`` (every value of ``tag`` of every finished run) and its table at the
    end of ``<out>.md``; nothing when no run logged ``tag``."""
    rows = curve_rows(results, tag)
    if not rows:
        return
    path = out.with_name(out.name + "_curves.csv")
    write_csv(path, rows)
    lines = [
        f"`{tag}` per run after the number of optimiser steps in each column "
        f"(every logged value: `{path.name}`):\n",
        *curves_table(rows, tag),
        "",
    ]
    md = out.with_name(out.name + ".md")
    md.write_text(md.read_text().rstrip("\n") + "\n\n" + "\n".join(lines))
