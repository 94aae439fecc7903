"""The warm-start study's tables: every condition per backend, and the paired Δs that answer
the review's claim — fine-tuned from softmax against the same backend trained from scratch.

Cells are mean ± std over seeds; where the task has a convergence threshold (reversal: test
token accuracy ≥ 99 %, as on every reversal page) its outcomes are bimodal (a run learns
reversal or stalls), so the table shows k/n converged and median [25th, 75th percentile] instead
(the CSV keeps both). A paired Δ is ``results.paired.seed_deltas`` (a Student-t interval and the
sign test).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import machine_line
from attn_lightning.records.files import markdown_table, write_csv
from lab.results.paired import SEED_INTERVAL_NOTE, seed_deltas
from lab.results.records import OK, RunResult
from lab.results.tables import (
    column,
    mean_std,
    median_iqr,
    records_machine_line,
    run_rows,
    summary_cell,
)
from lab.studies.warm_start.plan import (
    BACKENDS,
    CONDITIONS,
    CONVERGED,
    TASKS,
    in_run_order,
)

log = logging.getLogger("lab.studies.warm_start")

SHOWN = ("softmax", *BACKENDS)  # the tables' backends, the base's first
# The comparisons of the paired table: (condition, against, what it asks).
PAIRS = (
    ("fine-tune", "scratch", "warm start vs scratch, same steps"),
    ("fine-tune", "scratch, base + fine-tune steps", "warm start vs scratch, same total steps"),
    ("fine-tune + redraw", "fine-tune", "redrawing Performer's features while fine-tuning"),
    ("zero-shot", "fine-tune", "what the fine-tune adds"),
)


def _values(runs: Sequence[RunResult], backend: str, condition: str, key: str) -> dict[int, float]:
    return {
        r.seed: v
        for r in runs
        if r.info.get("backend") == backend
        and r.info.get("condition") == condition
        and r.status == OK
        and (v := r.value(key)) is not None
    }


def condition_rows(
    runs: Sequence[RunResult], metrics: Sequence[str], converged: tuple[str, float] | None = None
) -> list[dict[str, Any]]:
    """One row per (backend, condition that ran): n, each metric's mean, std, median and
    quartiles, and with ``converged = (metric, threshold)`` how many runs reach it."""
    rows = []
    for backend in SHOWN:
        for condition in ("base", *CONDITIONS):
            n = len(_values(runs, backend, condition, metrics[0]))
            if not n:
                continue
            row: dict[str, Any] = {"backend": backend, "condition": condition, "n": n}
            if converged is not None:
                reached = _values(runs, backend, condition, converged[0]).values()
                row["converged"] = sum(v >= converged[1] for v in reached)
            for key in metrics:
                values = list(_values(runs, backend, condition, key).values())
                row[f"{key}_mean"], row[f"{key}_std"] = mean_std(values)
                row[f"{key}_median"], row[f"{key}_q25"], row[f"{key}_q75"] = median_iqr(values)
            rows.append(row)
    return rows


def paired_rows(runs: Sequence[RunResult], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Per backend and ``PAIRS`` entry with shared seeds: each metric's paired Δ."""
    rows = []
    for backend in SHOWN:
        for condition, control, question in PAIRS:
            deltas = {
                key: seed_deltas(
                    _values(runs, backend, condition, key), _values(runs, backend, control, key)
                )
                for key in metrics
            }
            if all(d is None for d in deltas.values()):
                continue
            row: dict[str, Any] = {
                "backend": backend,
                "comparison": f"{condition} − {control}",
                "question": question,
            }
            for key, delta in deltas.items():
                scale = column(key).scale
                row[key] = delta and delta.format(scale=scale, digits=2)
                row[f"{key} per seed"] = delta and delta.per_seed(scale=scale, digits=2)
            rows.append(row)
    return rows


def write(
    out: Path, runs: Sequence[RunResult], *, task: str, command: str, notes: Sequence[str] = ()
) -> None:
    """``<out>.md``, ``<out>.csv`` (conditions), ``<out>_paired.csv`` and ``<out>_runs.csv`` of
    one task's runs (in run order, ``plan.in_run_order``); its outcomes are bimodal where it has
    a convergence threshold (``plan.CONVERGED``, module doc)."""
    runs, metrics, converged = in_run_order(runs), TASKS[task][1], CONVERGED.get(task)
    rows = condition_rows(runs, metrics, converged)
    paired = paired_rows(runs, metrics)
    write_csv(out.with_name(out.name + ".csv"), rows)
    write_csv(out.with_name(out.name + "_paired.csv"), paired)
    per_run = run_rows(runs, metrics, label="variant", info=("backend", "condition"))
    write_csv(out.with_name(out.name + "_runs.csv"), per_run)
    bimodal = converged is not None
    body = [
        [
            f"`{row['backend']}`",
            row["condition"],
            f"{row['converged']}/{row['n']}" if bimodal else row["n"],
            *(summary_cell(row, k, iqr=bimodal) for k in metrics),
        ]
        for row in rows
    ]
    spread = "mean ± std over seeds"
    if converged is not None:
        shown = column(converged[0])
        spread = (
            f"median [25th, 75th percentile] over seeds; converged = {shown.title} ≥ "
            f"{converged[1] * shown.scale:g} (outcomes are bimodal)"
        )
    titles = [column(k).title for k in metrics]
    pairs = [
        [f"`{p['backend']}`", p["comparison"], *(p[k] or "–" for k in metrics)] for p in paired
    ]
    text = [
        f"# Warm start from softmax: {task}\n",
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        (records_machine_line(runs) or machine_line()) + "\n",  # where the runs ran
        *notes,
        "Test split, best-by-validation checkpoint (zero-shot: the base's `last.ckpt`); "
        f"{spread}.\n",
        markdown_table(["backend", "condition", "converged" if bimodal else "n", *titles], body),
        f"\nPaired by seed: mean Δ [{SEED_INTERVAL_NOTE}] (n: seeds with Δ > 0, < 0, = 0); "
        "every seed's Δ in `_paired.csv`.\n",
        markdown_table(["backend", "comparison", *titles], pairs),
    ]
    out.with_name(out.name + ".md").write_text("\n".join(text) + "\n")
    log.info("wrote %s.md, %s.csv, %s_paired.csv, %s_runs.csv", *(out,) * 4)
