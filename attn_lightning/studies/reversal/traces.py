"""A reversal run's training trace, read from its TensorBoard folder: final loss, loss spikes
with their size and the gradient at them, and the learned coefficients over the steps.

``load_traces`` reads every finished run of a sweep (``runs.load_runs``) into a ``RunTrace``; the
row functions turn one trace into the lines of ``trajectories``' CSVs (see that module).
Spikes are ``GradientTracker``'s: a step whose loss is above 3× the median of the 50 before.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.results.curves import Scalars, series
from attn_lightning.results.records import RunResult
from attn_lightning.studies.reversal.dynamics import (
    NORM_TAG,
    SpikeGradient,
    max_grad_norm,
    spike_gradients,
    spike_steps,
)
from attn_lightning.studies.reversal.runs import load_runs
from attn_lightning.studies.runner import run_label

LOSS_TAG = "train/loss"
SPIKE_LOSS_TAG = "train/loss_at_spike"
SPIKE_RATIO_TAG = "train/loss_spike_ratio"
# GradientTracker's gradient at the spike's own step, measured every step (absent from runs
# logged before it): the norm, its ratio to the median of the steps before, the previous step's.
SPIKE_GRAD_TAGS = {
    "grad_at_spike": "grad/norm_at_spike",
    "grad_at_spike_over_median": "grad/norm_at_spike_ratio",
    "grad_before_spike_over_median": "grad/norm_before_spike_ratio",
}
RECENT = 200  # steps of gradient logs a spike's gradient is compared with (10 logs at 20)
# a_i, and c = (‖γ‖/‖γ₀‖)², the LN scale's growth (QKNorm.scale_growth; absent from older logs).
COEFFICIENT = re.compile(r"^attention/(?P<layer>.+)/(?P<key>a\d+|c)$")


@dataclass
class RunTrace:
    """One finished run's training trace (see the module docstring)."""

    variant: str
    seed: int
    steps: int | None
    test_loss: float | None
    scalars: Scalars = field(repr=False)


def final_loss(scalars: Scalars, tail: int) -> float | None:
    """Mean logged training loss over the last ``tail`` steps of the run; None if none logged."""
    points = series(scalars, LOSS_TAG)
    if not points:
        return None
    last = points[-1][0]
    values = [v for s, v in points if s > last - tail]
    return statistics.fmean(values)


def coefficient_order(key: str) -> tuple[int, int]:
    """Sort key of a coefficient tag's key: ``a0 < a1 < … < c`` (``c``, the kernel's scale, is
    logged by the learned polynomials since 2026-11-26, after their a_i)."""
    return (1, 0) if key == "c" else (0, int(key[1:]))


def coefficient_series(scalars: Scalars) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """``{(layer, key): [(step, value), ...]}`` for every ``attention/<layer>/a<i>`` and
    ``attention/<layer>/c`` tag, by layer then ``coefficient_order``."""
    out = {}
    for tag, points in scalars.items():
        match = COEFFICIENT.match(tag)
        if match:
            out[(match["layer"], match["key"])] = points
    return dict(sorted(out.items(), key=lambda kv: (kv[0][0], coefficient_order(kv[0][1]))))


def thin(points: Sequence[tuple[int, float]], every: int) -> list[tuple[int, float]]:
    """The first point of each ``every``-step bucket, and the last point."""
    if every < 1:
        raise ValueError(f"every must be >= 1 step, got {every}")
    kept: list[tuple[int, float]] = []
    for step, value in points:
        if not kept or step // every != kept[-1][0] // every:
            kept.append((step, value))
    if points and kept[-1] != points[-1]:
        kept.append(points[-1])
    return kept


def value_at(points: Sequence[tuple[int, float]], step: int) -> float | None:
    """The value logged at ``step`` or last before it; None before the first log."""
    before = [v for s, v in points if s <= step]
    return before[-1] if before else None


def spike_rows(trace: RunTrace) -> list[dict[str, Any]]:
    """One row per loss spike of a run (see ``<out>_spikes.csv`` in the module docstring)."""
    norms = series(trace.scalars, NORM_TAG)
    losses = dict(series(trace.scalars, SPIKE_LOSS_TAG))
    ratios = dict(series(trace.scalars, SPIKE_RATIO_TAG))
    gradients = {g.spike_step: g for g in spike_gradients(trace.scalars)}
    at_spike = {key: dict(series(trace.scalars, tag)) for key, tag in SPIKE_GRAD_TAGS.items()}
    rows = []
    for step in spike_steps(trace.scalars) or []:
        grad = gradients.get(step)
        rows.append(
            {
                "variant": trace.variant,
                "seed": trace.seed,
                "step": step,
                "loss": losses.get(step),
                "loss_over_median": ratios.get(step),
                "grad_step": None if grad is None else grad.grad_step,
                "grad_norm": None if grad is None else grad.norm,
                "grad_norm_over_median": None if grad is None else grad.ratio,
                "grad_norm_over_recent": None if grad is None else _over_recent(norms, grad),
                "top_group": None if grad is None else grad.group,
                "top_group_over_median": None if grad is None else grad.group_ratio,
                **{key: values.get(step) for key, values in at_spike.items()},
            }
        )
    return rows


BURST_GAP = 100  # steps: spikes closer than this to the previous one are one burst


def burst_rows(spikes: Sequence[dict[str, Any]], gap: int = BURST_GAP) -> list[dict[str, Any]]:
    """Spikes grouped into bursts, one row each: a run's spikes within ``gap`` steps of the
    previous one belong to the same burst (``spikes``: ``spike_rows`` of any runs, in order).

    Flagged steps come in bursts (one instability flags tens to hundreds of steps until the
    running median catches up), so the count of flags says less than the count of bursts. Each
    row: its run, first and last step, spikes, the largest loss and size (× median), and the
    gradient before it as seen at its *first* spike (the columns of ``spike_rows``, with their
    ``first_`` prefix): whether anything stood out before the loss did.
    """
    bursts: list[list[dict[str, Any]]] = []
    for row in spikes:
        last = bursts[-1][-1] if bursts else {}
        same_run = (last.get("variant"), last.get("seed")) == (row["variant"], row["seed"])
        if same_run and row["step"] - last["step"] <= gap:
            bursts[-1].append(row)
        else:
            bursts.append([row])
    out = []
    for burst in bursts:
        first = burst[0]
        losses = [r["loss"] for r in burst if r["loss"] is not None]
        sizes = [r["loss_over_median"] for r in burst if r["loss_over_median"] is not None]
        out.append(
            {
                "variant": first["variant"],
                "seed": first["seed"],
                "first_step": first["step"],
                "last_step": burst[-1]["step"],
                "spikes": len(burst),
                "max_loss": max(losses) if losses else None,
                "max_over_median": max(sizes) if sizes else None,
                **{f"first_{key}": first[key] for key in BURST_GRADIENT},
            }
        )
    return out


# The gradient columns of a burst's first spike (``spike_rows`` keys).
BURST_GRADIENT = (
    "grad_step",
    "grad_norm_over_recent",
    "grad_at_spike",
    "grad_at_spike_over_median",
    "grad_before_spike_over_median",
)


def _over_recent(norms: Sequence[tuple[int, float]], grad: SpikeGradient) -> float | None:
    """The spike's gradient norm / the median of the norms logged in the ``RECENT`` steps before.

    A long run's own median norm is that of its converged phase (10⁻⁶ where the loss is 10⁻⁸),
    which makes every early norm look huge; the recent ones are the spike's own context.
    """
    before = [v for s, v in norms if grad.grad_step - RECENT <= s < grad.grad_step]
    finite = [v for v in before if math.isfinite(v)]
    median = statistics.median(finite) if finite else None
    return grad.norm / median if median else None


def run_row(trace: RunTrace, tail: int, spikes: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run's line of ``<out>_runs.csv``; ``spikes``: its ``spike_rows``."""
    losses = [v for _, v in series(trace.scalars, LOSS_TAG)]
    sizes = [r["loss_over_median"] for r in spikes if r["loss_over_median"] is not None]
    return {
        "variant": trace.variant,
        "seed": trace.seed,
        "steps": trace.steps,
        "final_train_loss": final_loss(trace.scalars, tail),
        "min_train_loss": min(losses) if losses else None,
        "test_loss": trace.test_loss,
        "spikes": None if spike_steps(trace.scalars) is None else len(spikes),
        "largest_spike": max(sizes) if sizes else None,
        "max_grad_norm": max_grad_norm(trace.scalars),
    }


def coefficient_rows(trace: RunTrace, every: int) -> list[dict[str, Any]]:
    """The run's lines of ``<out>_coefficients.csv`` (long format)."""
    rows = []
    for (layer, key), points in coefficient_series(trace.scalars).items():
        for step, value in thin(points, every):
            rows.append(
                {
                    "variant": trace.variant,
                    "seed": trace.seed,
                    "layer": layer,
                    "key": key,
                    "step": step,
                    "value": value,
                }
            )
    return rows


def load_traces(
    root: Path, experiment: str, variants: Sequence[str] | None = None
) -> tuple[list[RunTrace], list[RunResult]]:
    """The finished runs' traces, and the runs left out (unfinished, or no TensorBoard folder).

    ``variants``: labels or backend specs (``polynomial:degree=8``), in the order wanted.
    """
    if variants is not None:
        variants = [run_label(v) for v in variants]
    traces, missing = [], []
    for run in load_runs(root, experiment, threshold=0.99):
        if variants is not None and run.variant not in variants:
            continue
        scalars = run.info.get("scalars")  # absent: unfinished, or no TensorBoard folder
        if run.status == "unfinished" or scalars is None:
            missing.append(run)
            continue
        traces.append(
            RunTrace(run.variant, run.seed, run.global_step, run.value("test/loss"), scalars)
        )
    if variants is not None:
        order = {v: i for i, v in enumerate(variants)}
        traces.sort(key=lambda t: (order[t.variant], t.seed))
    return traces, missing
