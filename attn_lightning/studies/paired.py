"""Paired differences between a variant and its control over the seeds both ran.

Runs with the same seed share the initialisation stream, the batch order and the data, so the
per-seed difference removes that shared variance: the study reports ``mean Δ`` with a 95 %
Student-t interval over the seeds (``n − 1`` degrees of freedom), not two overlapping
``mean ± std``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class PairedDelta:
    """``mean`` of ``variant − control`` over ``n`` seeds and its ``level`` interval."""

    n: int
    mean: float
    low: float
    high: float
    level: float = 0.95

    def format(self, *, scale: float = 1.0, digits: int = 4) -> str:
        """``+0.0012 [-0.0003, +0.0027] (n=5)``; a single pair has no interval."""
        body = f"{self.mean * scale:+.{digits}f}"
        if self.n > 1:
            body += f" [{self.low * scale:+.{digits}f}, {self.high * scale:+.{digits}f}]"
        return f"{body} (n={self.n})"


def paired_delta(
    variant: Mapping[int, float], control: Mapping[int, float], *, level: float = 0.95
) -> PairedDelta | None:
    """``variant[s] − control[s]`` over the seeds ``s`` in both; None when none is shared.

    The interval is ``mean ± t_{(1+level)/2, n−1} · sd / √n``; with one pair it collapses to the
    difference (no spread to estimate), which ``PairedDelta.format`` shows without brackets.
    """
    seeds = sorted(set(variant) & set(control))
    if not seeds:
        return None
    deltas = [variant[s] - control[s] for s in seeds]
    mean = statistics.fmean(deltas)
    if len(deltas) == 1:
        return PairedDelta(1, mean, mean, mean, level)
    half = float(stats.t.ppf((1 + level) / 2, len(deltas) - 1)) * statistics.stdev(deltas)
    half /= math.sqrt(len(deltas))
    return PairedDelta(len(deltas), mean, mean - half, mean + half, level)
