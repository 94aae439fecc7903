"""What a reversal run's logged curves say about its training: steps to a validation
accuracy, the checkpoint the test split was evaluated on, loss spikes and the gradients around
them.

Pure functions of ``{tag: [(step, value), ...]}``, a run record's ``curves.csv`` as
``results.records.run_scalars`` returns it. Loss spikes are the ``train/loss_spike`` flags of
``callbacks.gradients.GradientTracker``; gradient norms (``grad/global_norm`` and one per
parameter group) are logged every few steps (20 in the study), so a spike between two logs is
compared with the gradient up to 19 steps before it, and the lag is reported with the ratio.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from lab.results.curves import series
from lab.results.records import Scalars

VAL_TAG = "val/token_acc"
VAL_LOSS_TAG = "val/loss"  # what the checkpoint callback monitors (mode min)
SPIKE_TAG = "train/loss_spike"
NORM_TAG = "grad/global_norm"
GROUPS = ("attention", "feedforward", "embedding", "other")


def steps_to_threshold(scalars: Scalars, threshold: float) -> int | None:
    """The first logged step whose ``VAL_TAG`` ≥ ``threshold``; None if never (or never logged)."""
    return next((step for step, value in series(scalars, VAL_TAG) if value >= threshold), None)


def best_validation(scalars: Scalars) -> tuple[int, float] | None:
    """``(optimiser steps, value)`` of the lowest logged ``VAL_LOSS_TAG``; None if never logged.

    The checkpoint that ``ModelCheckpoint(monitor="val/loss", mode="min")`` keeps as best, so the
    one the test split is evaluated on: the first of equal values (it replaces only on a strict
    improvement), its steps the logged step + 1 — the N of its ``best-step=N.ckpt``. It matters
    where a run's loss dips after a spike burst: the best checkpoint can sit in that dip.
    """
    points = [p for p in series(scalars, VAL_LOSS_TAG) if math.isfinite(p[1])]
    if not points:
        return None
    step, value = min(points, key=lambda point: point[1])  # min keeps the first of ties
    return step + 1, value


def spike_steps(scalars: Scalars) -> list[int] | None:
    """Steps flagged as loss spikes; None when the run logged no spike flags at all."""
    flags = series(scalars, SPIKE_TAG)
    if not flags:
        return None
    return [step for step, flag in flags if flag >= 0.5]


def max_grad_norm(scalars: Scalars) -> float | None:
    """The largest logged global gradient norm (before clipping); None if none was logged."""
    norms = [value for _, value in series(scalars, NORM_TAG)]
    return max(norms) if norms else None


def finite_median(points: Sequence[tuple[int, float]]) -> float | None:
    """The median of the finite values of ``points``; None without one (a diverged run logs
    inf/nan norms, which would make the median meaningless)."""
    values = [v for _, v in points if math.isfinite(v)]
    return statistics.median(values) if values else None


def _ratio(value: float, median: float | None) -> float | None:
    return value / median if median else None


@dataclass(frozen=True)
class SpikeGradient:
    """The gradients logged at (or last before) a loss spike, relative to the run's medians.

    Attributes:
        spike_step: the flagged step.
        grad_step: the last gradient-norm step ≤ ``spike_step`` (lag = the difference).
        norm: global gradient norm at ``grad_step``.
        ratio: ``norm`` / the run's median global norm.
        group: the group with the largest norm / its own run median at ``grad_step``.
        group_ratio: that group's ratio.
    """

    spike_step: int
    grad_step: int
    norm: float
    ratio: float | None
    group: str | None
    group_ratio: float | None

    @property
    def lag(self) -> int:
        """Steps between the gradient log and the spike (0: the spike's own gradient)."""
        return self.spike_step - self.grad_step


def _largest_group(scalars: Scalars, step: int) -> tuple[str | None, float | None]:
    best: tuple[str | None, float | None] = (None, None)
    for group in GROUPS:
        points = series(scalars, f"grad/{group}")
        value = dict(points).get(step)
        ratio = None if value is None else _ratio(value, finite_median(points))
        # A non-finite ratio (inf/nan grads) is the most telling group, so it wins.
        if ratio is not None and (best[1] is None or not ratio <= best[1]):
            best = (group, ratio)
    return best


def spike_gradients(scalars: Scalars) -> list[SpikeGradient]:
    """One record per loss spike that has a gradient log at or before it (see the class)."""
    norms = series(scalars, NORM_TAG)
    median = finite_median(norms)
    records = []
    for spike in spike_steps(scalars) or []:
        before = [(s, v) for s, v in norms if s <= spike]
        if not before:  # no gradient logged yet; the detector's warm-up makes this rare
            continue
        grad_step, norm = before[-1]
        group, group_ratio = _largest_group(scalars, grad_step)
        records.append(
            SpikeGradient(spike, grad_step, norm, _ratio(norm, median), group, group_ratio)
        )
    return records
