"""The warm-start study's tables, a plan page's ``warm_start`` report
(``configs/studies/warm_start_{reversal,digits}.yaml``): every condition per backend, and the
paired Δs that answer the review's claim — fine-tuned from softmax against the same backend
trained from scratch.

A row's condition is its run's stage (``CONDITIONS``), its backend the stage's attention spec
(``BACKENDS``). Cells are mean ± std over seeds; where the task has a convergence threshold
(reversal: test token accuracy ≥ 99 %, as on every reversal page) its outcomes are bimodal (a
run learns reversal or stalls), so the table shows k/n converged and median [25th, 75th
percentile] instead (the CSV keeps both). A paired Δ is ``results.paired.seed_deltas`` (a
Student-t interval and the sign test).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import machine_line
from attn_lightning.records.files import markdown_table, write_csv
from lab.results.paired import SEED_INTERVAL_NOTE, seed_deltas
from lab.results.records import OK, RunResult, load_runs
from lab.results.tables import (
    column,
    mean_std,
    median_iqr,
    records_machine_line,
    run_rows,
    summary_cell,
)

# The backends swapped in, by the plan's attention spec: the tables' short names.
BACKENDS = {
    "performer:num_features=64": "performer_m64",
    "performer:num_features=256": "performer_m256",
    "linear": "linear",
    "polysketch": "polysketch",
}
# The plan's stages: each one's condition, in the tables' order (the base first).
CONDITIONS = {
    "base": "base",
    "zero_shot": "zero-shot",
    "fine_tune": "fine-tune",
    "fine_tune_redraw": "fine-tune + redraw",
    "scratch": "scratch",
    "scratch_total": "scratch, base + fine-tune steps",
}
# What each task's page shows: its headline metrics.
TASKS = {
    "reversal": ("test/token_acc", "test/exact_acc", "test/loss"),
    "digits": ("test/acc", "test/loss"),
}
# Tasks whose runs converge or stall (bimodal): the metric and threshold of "converged", the
# reversal pages' rule.
CONVERGED: dict[str, tuple[str, float]] = {"reversal": ("test/token_acc", 0.99)}
SHOWN = ("softmax", *BACKENDS.values())  # the tables' backends, the base's first
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
        for condition in CONDITIONS.values():
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


def in_run_order(runs: Iterable[RunResult]) -> list[RunResult]:
    """``runs`` as the per-run table lists them: every seed's base, then per seed each backend's
    conditions, as ``BACKENDS`` and ``CONDITIONS`` list them."""
    backends, conditions = list(SHOWN), list(CONDITIONS.values())

    def key(run: RunResult) -> tuple[int, int, int, int]:
        backend, condition = run.info["backend"], run.info["condition"]
        if condition == "base":
            return (0, run.seed, 0, 0)
        return (1, run.seed, backends.index(backend), conditions.index(condition))

    return sorted(runs, key=key)


def study_runs(roots: Sequence[Path]) -> list[RunResult]:
    """The runs recorded under ``roots``, each labelled ``<stage>/<variant>`` with its backend
    and condition in ``info``.

    Raises:
        FileNotFoundError: no run record under ``roots``.
        ValueError: a run whose stage or backend is not one of the study's, naming it.
    """
    runs = [run for root in roots for run in load_runs(root)]
    if not runs:
        raise FileNotFoundError(f"no run records under {', '.join(map(str, roots))}")
    labelled = []
    for run in runs:
        stage, backend = run.info.get("stage"), BACKENDS.get(run.variant, run.variant)
        if stage not in CONDITIONS or backend not in SHOWN:
            raise ValueError(
                f"{run.log_dir}: stage {stage!r}, backend {run.variant!r}; the stages are "
                f"{list(CONDITIONS)}, the backends softmax and {list(BACKENDS)}"
            )
        info = {**run.info, "backend": backend, "condition": CONDITIONS[stage]}
        labelled.append(replace(run, variant=f"{stage}/{run.variant}", info=info))
    return labelled


def write(roots: Sequence[Path], out: Path, *, command: str, task: str) -> None:
    """``<out>.md``, ``<out>.csv`` (conditions), ``<out>_paired.csv`` and ``<out>_runs.csv`` of
    one task's runs recorded under ``roots`` (in run order); its outcomes are bimodal where it has
    a convergence threshold (``CONVERGED``, module doc).

    Raises:
        ValueError: ``task`` is not one of ``TASKS``, or a run is not one of the study's.
        FileNotFoundError: no run record under ``roots``.
    """
    if task not in TASKS:
        raise ValueError(f"task {task!r}; the tasks are {list(TASKS)}")
    runs, metrics, converged = in_run_order(study_runs(roots)), TASKS[task], CONVERGED.get(task)
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
        "Test split, best-by-validation checkpoint (zero-shot: the base's `last.ckpt`); "
        f"{spread}.\n",
        markdown_table(["backend", "condition", "converged" if bimodal else "n", *titles], body),
        f"\nPaired by seed: mean Δ [{SEED_INTERVAL_NOTE}] (n: seeds with Δ > 0, < 0, = 0); "
        "every seed's Δ in `_paired.csv`.\n",
        markdown_table(["backend", "comparison", *titles], pairs),
    ]
    out.with_name(out.name + ".md").write_text("\n".join(text) + "\n")
