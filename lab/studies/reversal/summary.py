"""The numbers of a reversal report: one summary row per variant, paired differences.

Outcomes over seeds are bimodal (a run converges or not), so a row gives converged k/n (test
token accuracy ≥ the threshold) and ``median [25th, 75th percentile]`` over the finished runs
rather than mean ± std: of the test ``METRICS``, the steps to the threshold (over the runs that
reached it) and the loss spikes per run; at each spike, the gradient norm over the run's median,
its lag and the group furthest above its own median (most frequent). Runs converted from a
committed report keep no spike's gradients, only the variant's numbers the report gave: their
``CARRIED`` tag, used when every run carries the same and none logged more.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from lab.results.paired import seed_deltas
from lab.results.records import RunResult
from lab.results.tables import Convergence, median_iqr
from lab.studies.reversal.dynamics import GROUPS, SpikeGradient
from lab.studies.reversal.runs import CONVERGENCE_METRIC, finished

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
