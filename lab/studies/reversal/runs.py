"""The runs of a reversal study, read from run records, and the numbers of its report.

Every folder holding a ``record.json`` under the given folders is one run; what its
``curves.csv`` says (``curve_facts``) is kept in ``RunResult.info``. A run's ``status`` is the
report's word for it: ``ok`` (test metrics present), ``no test`` (an ok record without them) or
``unfinished`` (a record not ``ok``: running, stopped or crashed).

Outcomes over seeds are bimodal (a run converges or not), so a summary row gives converged k/n
(test token accuracy ≥ the threshold) and ``median [25th, 75th percentile]`` over the finished
runs rather than mean ± std: of the test ``METRICS``, the steps to the threshold (over the runs
that reached it) and the loss spikes per run; at each spike, the gradient norm over the run's
median, its lag and the group furthest above its own median (most frequent). ``paired_rows``
pairs each variant with a control by seed.

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
from pathlib import Path
from typing import Any

from attn_lightning.records.run_files import load_record
from lab.results.paired import seed_deltas
from lab.results.records import (
    OK,
    RunResult,
    Scalars,
    load_run,
    record_folders,
    run_label,
    run_scalars,
)
from lab.results.tables import Convergence, median_iqr, series
from lab.studies.reversal.traces import (
    GROUPS,
    VAL_LOSS_TAG,
    VAL_TAG,
    SpikeGradient,
    best_validation,
    max_grad_norm,
    spike_gradients,
    spike_steps,
    steps_to_threshold,
)

log = logging.getLogger("lab.studies.reversal")

CONVERGENCE_METRIC = "test/token_acc"
DEFAULT_THRESHOLD = 0.99
# Facts a converted record carries as metrics (its CSV's columns): int, else float.
FACTS = ("steps_to_threshold", "spikes", "best_ckpt_step", "max_grad_norm", "final_val_loss")


def finished(run: RunResult) -> bool:
    """Whether the run's record is ``ok``."""
    return run.status != "unfinished"


def curve_facts(scalars: Scalars, threshold: float) -> dict[str, Any]:
    """The facts whose curves ``scalars`` holds (``traces``): ``steps_to_threshold`` (None:
    never reached), ``spikes`` and ``spike_gradients`` (absent: no flags logged),
    ``max_grad_norm``, ``best_ckpt_step`` (``best_validation``), ``final_val_loss`` (the last
    validation's) and ``val_curve`` (every logged ``(step, val/token_acc)``)."""
    facts: dict[str, Any] = {}
    if VAL_TAG in scalars:
        facts["steps_to_threshold"] = steps_to_threshold(scalars, threshold)
        facts["val_curve"] = series(scalars, VAL_TAG)
    spikes = spike_steps(scalars)
    if spikes is not None:
        facts["spikes"] = len(spikes)
        facts["spike_gradients"] = spike_gradients(scalars)
    if (norm := max_grad_norm(scalars)) is not None:
        facts["max_grad_norm"] = norm
    if (best := best_validation(scalars)) is not None:
        facts["best_ckpt_step"] = best[0]
    if VAL_LOSS_TAG in scalars:
        facts["final_val_loss"] = scalars[VAL_LOSS_TAG][-1][1]
    return facts


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
    """The labels of ``variants`` (attention specs are turned into labels; default: every label
    recorded, sorted) and their runs under ``roots``, by label then seed; a variant without runs
    is named in a warning. A (variant, seed) recorded twice keeps the first finished record (else
    the first), in the order of ``roots``.

    Raises:
        FileNotFoundError: naming a folder of ``roots`` that does not exist or holds no record.
    """
    found: dict[tuple[str, int], RunResult] = {}
    for root in roots:
        folders = record_folders(root)
        if not folders:
            what = "holds no run record (record.json)" if root.is_dir() else "does not exist"
            raise FileNotFoundError(f"runs folder {root} {what}")
        for folder in folders:
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
    reached = _facts(done, "steps_to_threshold")
    row["reached"] = len(reached)
    _put_median_iqr(row, "steps_to_threshold", reached)
    spikes = _facts(done, "spikes")
    _put_median_iqr(row, "spikes", spikes)
    row["spikes_max"] = max(spikes, default=None)
    records: list[SpikeGradient] = [g for r in done for g in r.info.get("spike_gradients", [])]
    ratios = [g.ratio for g in records if g.ratio is not None]
    # Unknown (None) when a run had spikes but no gradient curves to read them from.
    known = all("spike_gradients" in r.info or not r.info.get("spikes") for r in done)
    row["spike_records"] = len(records) if known else None
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
    """Per variant, the paired ``variant − control`` of each ``PAIRED`` value over shared seeds
    (``results.paired.seed_deltas``: t-interval, signs and sign test); steps-to
    pairs only the seeds where both runs reached the threshold. None when no seed is shared."""

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
    """Numbers, scaled as shown, per ``PAIRED`` column: ``<title> mean|low|high`` (the
    interval), ``n``, the seeds with Δ ``> 0|< 0|= 0`` and ``per seed`` (``s0 +1.00, ...``)."""
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
