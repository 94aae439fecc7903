"""The ``reversal`` report kind: a reversal sweep's outcomes over seeds, steps to 99 %, spikes.

Every folder holding a ``record.json`` under the page's folders is one run; what its
``curves.csv`` says (``curve_facts``) is kept in ``RunResult.info``. A run's ``status`` is the
report's word for it: ``ok`` (test metrics present), ``no test`` (an ok record without them) or
``unfinished`` (a record not ``ok``: running, stopped or crashed).

Outcomes over seeds are bimodal, so a row gives converged k/n and ``median [25th, 75th
percentile]``, not mean ± std. ``report`` writes ``<out>.md`` (outcome, dynamics, per-run, paired
tables, validation curves), ``<out>.csv``, ``<out>_runs.csv``, ``_curves.csv``, ``_paired.csv``.

Records converted from a committed ``<out>_runs.csv`` have no curves: what the CSV said is read
here and only here (``read_run``): a fact whose curve the record lacks is the metric of the same
name (``FACTS``), and the variant's spike-gradient columns of the CSV are its ``CARRIED`` tag,
used when every run carries the same and none logged more.
"""

from __future__ import annotations

import logging
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from attn_lightning.records.environment import machine_line
from attn_lightning.records.files import markdown_table, write_csv
from attn_lightning.records.run_files import load_record
from lab.results.paired import SEED_INTERVAL_NOTE, seed_deltas
from lab.results.records import (
    OK,
    RunResult,
    load_run,
    record_folders,
    run_label,
    run_scalars,
)
from lab.results.tables import (
    Convergence,
    column,
    curves_table,
    default_metrics,
    format_number,
    median_iqr,
    records_machine_line,
    summary_cell,
)
from lab.studies.reversal_traces import GROUPS, VAL_TAG, SpikeGradient, curve_facts

log = logging.getLogger("lab.studies.reversal")

CONVERGENCE_METRIC = "test/token_acc"
DEFAULT_THRESHOLD = 0.99
# Facts a converted record carries as metrics (its CSV's columns): int, else float.
FACTS = ("steps_to_threshold", "spikes", "best_ckpt_step", "max_grad_norm", "final_val_loss")


def finished(run: RunResult) -> bool:
    """Whether the run's record is ``ok``."""
    return run.status != "unfinished"


def read_run(folder: Path, threshold: float) -> RunResult:
    """The run of the record in ``folder``: its label, the report's status, only its test
    metrics, and its facts (``curve_facts``) in ``info`` beside its tags."""
    run = load_run(folder)
    record = load_record(folder)
    # The CSV(s) a converted record came from (one, or a list for the trajectory records).
    source = (record.get("source") or {}).get("converted_from") or []
    run.info["sources"] = [Path(s).name for s in ([source] if isinstance(source, str) else source)]
    run.variant = run_label(run.variant)
    if run.status != OK:  # left out of every number: no metrics, no facts
        run.status, run.metrics, run.seconds, run.global_step = "unfinished", {}, None, None
        return run
    carried = {k: run.metrics[k] for k in FACTS if k in run.metrics}
    carried = {k: v if k in FACTS[3:] else int(v) for k, v in carried.items()}
    run.info.update({**carried, **curve_facts(run_scalars(folder), threshold)})
    run.metrics = {k: float(v) for k, v in run.metrics.items() if k.startswith("test/")}
    if CONVERGENCE_METRIC not in run.metrics:
        run.status = "no test"
    return run


def chosen_runs(
    roots: Sequence[Path], variants: Sequence[str] | None, threshold: float = DEFAULT_THRESHOLD
) -> tuple[list[str], list[RunResult]]:
    """The labels of ``variants`` (default: every label recorded, sorted) and their runs under
    ``roots``, by label then seed; a (variant, seed) recorded twice keeps the first finished
    record, in the order of ``roots``. FileNotFoundError: a folder without records."""
    found: dict[tuple[str, int], RunResult] = {}
    for root in roots:
        for folder in record_folders(root, required=True):
            run = read_run(folder, threshold)
            key = (run.variant, run.seed)
            if key not in found or (not finished(found[key]) and finished(run)):
                found[key] = run
    names = [run_label(v) for v in variants] if variants else sorted({v for v, _ in found})
    missing = [n for n in names if not any(v == n for v, _ in found)]
    if missing:
        log.warning("no runs of %s under %s", ", ".join(missing), ", ".join(map(str, roots)))
    runs = [r for r in found.values() if r.variant in names]
    return names, sorted(runs, key=lambda r: (names.index(r.variant), r.seed))


# The tag holding a converted run's variant's spike-gradient columns (``SPIKE_COLUMNS``).
CARRIED = "variant_spike_gradients"
SPIKE_COLUMNS: tuple[str, ...] = ("spike_records", "spike_grad_ratio_median")
SPIKE_COLUMNS += ("spike_grad_lag_median", "spike_top_group", "spike_top_group_count")
# Summary columns, in the order the study asked for them.
METRICS: tuple[str, ...] = ("test/token_acc", "test/exact_acc", "test/gen_token_acc")
METRICS += ("test/gen_exact_acc", "test/loss")


def _put_median_iqr(row: dict[str, Any], key: str, values: Sequence[float]) -> None:
    row[f"{key}_median"], row[f"{key}_q25"], row[f"{key}_q75"] = median_iqr(values)


def _facts(runs: Sequence[RunResult], key: str) -> list[Any]:
    return [v for r in runs if (v := r.info.get(key)) is not None]


def summarize_variant(name: str, runs: Sequence[RunResult], threshold: float) -> dict[str, Any]:
    """The summary row (module docstring) of ``name``'s runs among ``runs`` (none: zeros)."""
    mine = [r for r in runs if r.variant == name]
    done = [r for r in mine if finished(r)]
    rule = Convergence(CONVERGENCE_METRIC, threshold)
    row: dict[str, Any] = {
        "variant": name,
        "runs": len(done),
        "unfinished": len(mine) - len(done),
        "converged": sum(rule.converged(r.value(rule.metric)) for r in done),
    }
    for key in METRICS:
        _put_median_iqr(row, key, [v for r in done if (v := r.value(key)) is not None])
    reached = _facts(done, "steps_to_threshold")  # None: no run knows (converted, no curves)
    row["reached"] = len(reached) if any("steps_to_threshold" in r.info for r in done) else None
    _put_median_iqr(row, "steps_to_threshold", reached)
    spikes = _facts(done, "spikes")
    _put_median_iqr(row, "spikes", spikes)
    row["spikes_max"] = max(spikes, default=None)
    records: list[SpikeGradient] = [g for r in done for g in r.info.get("spike_gradients", [])]
    ratios = [g.ratio for g in records if g.ratio is not None]
    # Unknown (None) when a run had spikes but no gradient curves to read them from.
    known = all("spike_gradients" in r.info or not r.info.get("spikes") for r in done)
    traced = any("spikes" in r.info for r in done)
    row["spike_records"] = len(records) if known and traced else None
    row["spike_grad_ratio_median"] = statistics.median(ratios) if ratios else None
    row["spike_grad_lag_median"] = statistics.median([g.lag for g in records]) if records else None
    groups = Counter(g.group for g in records if g.group is not None)
    # Ties go to the first group in GROUPS order, so the table does not depend on run order.
    top = max(GROUPS, key=lambda g: groups[g]) if groups else None
    row["spike_top_group"], row["spike_top_group_count"] = top, groups[top] if top else None
    carried = [c for r in done if "spike_gradients" not in r.info and (c := r.info.get(CARRIED))]
    if done and len(carried) == len(done) and all(c == carried[0] for c in carried):
        row.update({k: carried[0].get(k) for k in SPIKE_COLUMNS})
    _put_median_iqr(row, "fit_seconds", [r.seconds for r in done if r.seconds is not None])
    return row


# Paired Δ columns: (title, value of a run, scale, digits).
PAIRED: tuple[tuple[str, Callable[[RunResult], float | None], float, int], ...] = (
    ("Δ test loss", lambda r: r.value("test/loss"), 1.0, 5),
    ("Δ token acc (pp)", lambda r: r.value("test/token_acc"), 100.0, 2),
    ("Δ exact-seq acc (pp)", lambda r: r.value("test/exact_acc"), 100.0, 2),
    ("Δ steps to threshold", lambda r: r.info.get("steps_to_threshold"), 1.0, 0),
)


def paired_rows(
    runs: Sequence[RunResult], names: Sequence[str], control: str
) -> list[dict[str, Any]]:
    """Per variant, the paired ``variant − control`` (``seed_deltas``) of each ``PAIRED`` value
    over the seeds both have it (steps-to: both reached the threshold); None: no seed shared."""

    def values(name: str, value: Callable[[RunResult], float | None]) -> dict[int, float]:
        done = [r for r in runs if r.variant == name and finished(r)]
        return {r.seed: float(v) for r in done if (v := value(r)) is not None}

    return [
        {"variant": name, "control": control}
        | {title: seed_deltas(values(name, v), values(control, v)) for title, v, *_ in PAIRED}
        for name in names
        if name != control
    ]


def paired_csv_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per ``PAIRED`` column, scaled as shown: the interval, n, the signs and every seed's Δ."""
    flat = []
    for row in rows:
        out: dict[str, Any] = {"variant": row["variant"], "control": row["control"]}
        for title, _, scale, digits in PAIRED:
            delta = row[title]
            for part in ("mean", "low", "high"):
                out[f"{title} {part}"] = None if delta is None else getattr(delta, part) * scale
            for part, attr in (("n", "n"), ("> 0", "positive"), ("< 0", "negative")):
                out[f"{title} {part}"] = None if delta is None else getattr(delta, attr)
            out[f"{title} = 0"] = None if delta is None else delta.zero
            out[f"{title} per seed"] = (
                None if delta is None else delta.per_seed(scale=scale, digits=digits)
            )
        flat.append(out)
    return flat


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
        reached = "–" if row["reached"] is None else f"{row['reached']}/{row['runs']}"
        cells = [f"`{row['variant']}`", steps, reached, spikes]
        cells += [cell(row["spikes_max"], ".0f"), cell(row["spike_records"], ".0f")]
        cells += [cell(row["spike_grad_ratio_median"], ".2f")]
        cells += [cell(row["spike_grad_lag_median"], ".0f")]
        body.append([*cells, "–" if top is None else f"{top} ({row['spike_top_group_count']})"])
    return markdown_table([*header, "lag (steps)", "top group at spike"], body)


def has_checkpoint_facts(runs: Sequence[RunResult]) -> bool:
    """Whether any run knows its best checkpoint's step or last validation loss (a converted
    run may not: the columns are then left out)."""
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
        converted = any("steps_to_threshold" not in r.info for r in runs if finished(r))
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
            "run median there (most frequent, with its count)."
            + (" A run converted from a per-run CSV without them: –." if converted else "")
            + "\n",
            dynamics_table(summary, threshold),
        ]
    caption = RUNS_CAPTION if has_checkpoint_facts(runs) else "Per run:"
    lines += ["", caption, "", runs_table(runs, threshold)]
    return "\n".join(lines) + "\n"


def paired_section(rows: Sequence[dict[str, Any]], control: str) -> str:
    """The paragraph and table of paired differences against ``control`` (``SeedDeltas``)."""
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
    """Write the files of the module docstring from the records under ``roots``; returns the
    summary rows. ``threshold``: test token accuracy of a converged run (``val/token_acc`` of
    steps-to); ``control``: a label or spec, adds the paired ``variant − control`` tables."""
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
