"""The report of a sequence-reversal sweep: outcomes over seeds, steps to 99 %, loss spikes.

``report`` reads a page's run records (``runs.chosen_runs``), summarizes them per variant
(``runs.summarize_variant``) and writes:

* ``<out>.md``: the outcome, dynamics, per-run and paired tables and the validation curves;
* ``<out>.csv``: the summary, one row per variant;
* ``<out>_runs.csv``: one row per run;
* ``<out>_curves.csv``: ``val/token_acc`` at every validation of every run;
* ``<out>_paired.csv`` with ``control``: paired ``variant − control`` differences.

Every table is made by ``markdown_table``; the cells follow ``results.tables``'s formats
(``median [q25, q75]``, the scale and decimals of each known metric).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import machine_line
from attn_lightning.records.files import markdown_table, write_csv
from lab.results.paired import SEED_INTERVAL_NOTE
from lab.results.records import OK, RunResult, run_label
from lab.results.tables import (
    column,
    curves_table,
    default_metrics,
    format_number,
    records_machine_line,
    summary_cell,
)
from lab.studies.reversal.runs import (
    DEFAULT_THRESHOLD,
    METRICS,
    PAIRED,
    chosen_runs,
    paired_csv_rows,
    paired_rows,
    summarize_variant,
)
from lab.studies.reversal.traces import VAL_TAG

CHECKPOINT_FACTS = ("best_ckpt_step", "final_val_loss")
RUNS_CAPTION = (
    "Per run (best ckpt step: the optimiser step of the lowest validation loss, the checkpoint "
    "the test metrics come from; val loss at end: the last validation's):"
)


def cell(value: float | None, fmt: str) -> str:
    """``value`` in format ``fmt``; ``–`` for None."""
    return "–" if value is None else format(value, fmt)


def _metric(value: float | None, key: str) -> str:
    return format_number(value, scale=column(key).scale, digits=column(key).digits)


def outcome_table(summary: Sequence[dict[str, Any]]) -> str:
    """Converged k/n, unfinished, the test metrics and fit seconds per variant."""
    header = ["variant", "converged", "unfinished", *(column(k).title for k in METRICS)]
    body = [
        [f"`{row['variant']}`", f"{row['converged']}/{row['runs']}", str(row["unfinished"])]
        + [summary_cell(row, k, iqr=True) for k in METRICS]
        + [summary_cell(row, "fit_seconds", iqr=True, digits=0)]
        for row in summary
    ]
    return markdown_table([*header, "fit s / run"], body)


def dynamics_table(summary: Sequence[dict[str, Any]], threshold: float) -> str:
    """Steps to the threshold, loss spikes and the gradients at them per variant."""
    pct = f"{threshold * 100:g} %"
    header = ["variant", f"steps to {pct}", f"reached {pct}", "loss spikes / run"]
    header += ["max spikes / run", "spikes with a grad log", "grad norm / run median at spike"]
    body = []
    for row in summary:
        top = row["spike_top_group"]
        steps = summary_cell(row, "steps_to_threshold", iqr=True, digits=0)
        spikes = summary_cell(row, "spikes", iqr=True, digits=1)  # 0.5 must not read as 0
        cells = [f"`{row['variant']}`", steps, f"{row['reached']}/{row['runs']}", spikes]
        cells += [cell(row["spikes_max"], ".0f"), cell(row["spike_records"], ".0f")]
        cells += [cell(row["spike_grad_ratio_median"], ".2f")]
        cells += [cell(row["spike_grad_lag_median"], ".0f")]
        body.append([*cells, "–" if top is None else f"{top} ({row['spike_top_group_count']})"])
    return markdown_table([*header, "lag (steps)", "top group at spike"], body)


def has_checkpoint_facts(runs: Sequence[RunResult]) -> bool:
    """Whether any run knows its best checkpoint's step or last validation loss (a run
    converted from a CSV written before those columns does not: they are left out)."""
    return any(r.info.get(k) is not None for r in runs for k in CHECKPOINT_FACTS)


def runs_table(runs: Sequence[RunResult], threshold: float) -> str:
    """One line per run; the checkpoint columns when ``has_checkpoint_facts``."""
    header = ["variant", "seed", "status", *(column(k).title for k in METRICS)]
    header += [f"step to {threshold * 100:g} %", "spikes", "max grad norm", "steps", "fit s"]
    checkpoint = has_checkpoint_facts(runs)
    header += ["best ckpt step", "val loss at end"] if checkpoint else []
    body = []
    for r in runs:
        cells = [f"`{r.variant}`", str(r.seed), r.status]
        cells += [_metric(r.value(k), k) for k in METRICS]
        cells += [cell(r.info.get("steps_to_threshold"), ".0f"), cell(r.info.get("spikes"), ".0f")]
        cells += [cell(r.info.get("max_grad_norm"), ".3f"), cell(r.global_step, ".0f")]
        cells.append(cell(r.seconds, ".0f"))
        if checkpoint:
            cells.append(cell(r.info.get("best_ckpt_step"), ".0f"))
            cells.append(_metric(r.info.get("final_val_loss"), "test/loss"))
        body.append(cells)
    return markdown_table(header, body)


def report_markdown(
    summary: Sequence[dict[str, Any]], runs: Sequence[RunResult], threshold: float, command: str
) -> str:
    """The report's page: the command, the machine, the tables and what their cells mean. The
    dynamics table comes with runs that know their steps to the threshold or spikes; runs
    converted from a sweep's per-run CSV do not: the outcome and per-run tables, naming the CSVs."""
    pct = f"{threshold * 100:g} %"
    # Where every recorded run ran, finished or not (the results layer names ok runs' only).
    machine = records_machine_line([replace(r, status=OK) for r in runs]) or machine_line()
    lines = [f"Regenerate with:\n\n```bash\n{command}\n```\n", machine + "\n"]
    if not any(r.info.get(k) is not None for r in runs for k in ("steps_to_threshold", "spikes")):
        sources = ", ".join(sorted({f"`{s}`" for r in runs for s in r.info["sources"]}))
        note = f"Rebuilt from the committed per-run CSVs {sources} (the runs' logs are not kept). "
        lines += [
            (note if sources else "") + "Cells are median [25th, 75th percentile] over the "
            f"finished runs; converged: test token accuracy ≥ {pct}.\n",
            outcome_table(summary),
        ]
    else:
        lines += [
            "Cells are median [25th, 75th percentile] over the finished runs (quartiles "
            "interpolated linearly). Unfinished: a run whose record is not ok (running, stopped "
            "or crashed), left out of every other column.\n",
            f"Test split, best-by-validation checkpoint. Converged: test token accuracy ≥ {pct}.\n",
            outcome_table(summary),
            "",
            f"Steps to {pct}: the first logged step with `val/token_acc` ≥ {threshold:g} "
            "(Lightning logs the validation after n optimiser steps at step n − 1), over the runs "
            "that reached it. Loss spike: a step's loss > 3× the median of the 50 before. At each "
            "spike, the global gradient norm (before clipping) at the last gradient log at or "
            "before it, over the run's median norm (median over all spikes; lag: median steps "
            "between that log and the spike), and the group whose norm is furthest above its own "
            "run median there (most frequent, with its count).\n",
            dynamics_table(summary, threshold),
        ]
    caption = RUNS_CAPTION if has_checkpoint_facts(runs) else "Per run:"
    lines += ["", caption, "", runs_table(runs, threshold)]
    return "\n".join(lines) + "\n"


def paired_section(rows: Sequence[dict[str, Any]], control: str) -> str:
    """The paragraph and table of paired differences against ``control``: per ``PAIRED``
    column, mean [95 % interval] (n: positive+ negative− zero=) as ``SeedDeltas.format`` gives
    it."""
    body = []
    for row in rows:
        cells = [f"`{row['variant']}`", f"`{row['control']}`"]
        for title, _, scale, digits in PAIRED:
            delta = row[title]
            cells.append("–" if delta is None else delta.format(scale=scale, digits=digits))
        body.append(cells)
    header = ["variant", "control", *(title for title, *_ in PAIRED)]
    return (
        f"\nPaired differences, variant − `{control}`, over the seeds both ran: mean Δ "
        f"[{SEED_INTERVAL_NOTE}] (n seeds: how many "
        "with Δ > 0, < 0, = 0); steps to threshold over the seeds where both reached it. Every "
        "seed's Δ: `<out>_paired.csv`.\n\n" + markdown_table(header, body) + "\n"
    )


def _run_row(run: RunResult, metrics: Sequence[str], checkpoint: bool) -> dict[str, Any]:
    row = {
        "variant": run.variant,
        "seed": run.seed,
        "status": run.status,
        **{k: run.value(k) for k in metrics},
        "steps_to_threshold": run.info.get("steps_to_threshold"),
        "spikes": run.info.get("spikes"),
        "fit_seconds": None if run.seconds is None else round(run.seconds, 1),
        "global_step": run.global_step,
        "max_grad_norm": run.info.get("max_grad_norm"),
    }
    return {**row, **{k: run.info.get(k) for k in CHECKPOINT_FACTS}} if checkpoint else row


def report(
    roots: Sequence[Path],
    out: Path,
    *,
    command: str,
    variants: Sequence[str] | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    control: str | None = None,
) -> list[dict[str, Any]]:
    """Write the files of the module docstring; returns the summary rows.

    Args:
        roots: folders of run records (``runs.chosen_runs``).
        out: output path without extension.
        command: the command line shown in ``<out>.md``.
        variants: the variants and their order (``runs.chosen_runs``).
        threshold: test token accuracy of a converged run; ``val/token_acc`` of steps-to.
        control: a label (or spec): adds paired ``variant − control`` differences.

    Raises:
        FileNotFoundError: naming a folder of ``roots`` without run records.
    """
    names, runs = chosen_runs(roots, variants, threshold)
    summary = [summarize_variant(name, runs, threshold) for name in names]

    def sibling(suffix: str) -> Path:
        return out.with_name(out.name + suffix)

    write_csv(sibling(".csv"), summary)
    metrics = default_metrics(runs)
    # The header alone when the chosen variants have no runs yet.
    checkpoint = has_checkpoint_facts(runs)
    fields = list(_run_row(RunResult("", 0, None, ""), metrics, checkpoint))
    rows = [_run_row(r, metrics, checkpoint) for r in runs]
    write_csv(sibling("_runs.csv"), rows, fields=fields)
    # Long format, one row per validation; optimizer_steps = logged step + 1.
    curves = [
        {"variant": r.variant, "seed": r.seed, "optimizer_steps": step + 1, VAL_TAG: value}
        for r in runs
        for step, value in r.info.get("val_curve", [])
    ]
    text = report_markdown(summary, runs, threshold, command)
    if curves:
        write_csv(sibling("_curves.csv"), curves)
        table = "\n".join(curves_table(curves, VAL_TAG, max_columns=None, digits=1))
        text += "\nValidation token accuracy (%) per run after n optimiser steps (column n; "
        text += f"`<out>_curves.csv`):\n\n{table}\n"
    if control is not None:
        control_name = run_label(control)
        paired = paired_rows(runs, names, control_name)
        write_csv(sibling("_paired.csv"), paired_csv_rows(paired))
        text += paired_section(paired, control_name)
    sibling(".md").write_text(text)
    return summary
