"""The one measurement loop of a series: points of increasing N within a time budget.

``latency`` (``scaling.run_series``) and ``model`` (``model_step.run_series``) measure a series
the same way: for N in increasing order, a point is first estimated from the points measured
before it (``t·(N/N₀)^α``, α from the last two, clamped to [1, 2]: every backend here is between
linear and quadratic); a point estimated over the budget is skipped with its estimate and does
not stop the series, a real out-of-memory error is recorded as ``OOM`` and every larger N is
skipped with ``OOM at N=<n>`` (it cannot fit either). What a point is, how it is estimated and
how it is measured are the caller's.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol, TypeVar

import torch

from lab.benchmarks.measure import is_out_of_memory

log = logging.getLogger(__name__)


class Point(Protocol):
    """What the loop needs of a row: its N and a note for why it was not measured."""

    n: int
    note: str


P = TypeVar("P", bound=Point)


def growth_exponent(points: Sequence[tuple[int, float | None]]) -> float:
    """α of value ∝ N^α from the last two ``(N, value)`` points, clamped to [1, 2].

    2, the safe (quadratic) bound, with fewer than two points, two equal N or a value that is
    missing or not positive.
    """
    if len(points) < 2:
        return 2.0
    (n0, v0), (n1, v1) = points[-2:]
    if n0 == n1 or v0 is None or v1 is None or v0 <= 0 or v1 <= 0:
        return 2.0
    return min(2.0, max(1.0, math.log(v1 / v0) / math.log(n1 / n0)))


def extrapolate(value: float, n0: int, n: int, exponent: float = 2.0) -> float:
    """``value · (N/N₀)^α``: a cost measured at ``n0`` carried to ``n``."""
    return value * (n / n0) ** exponent


def run_budgeted(
    lengths: Iterable[int],
    *,
    new_row: Callable[[int], P],
    skip: Callable[[Sequence[P], P], str | None],
    measure: Callable[[P], None],
    device: torch.device,
    measured_line: Callable[[P], str] | None = None,
) -> list[P]:
    """The rows of one series, measured in increasing N within the budget.

    Args:
        lengths: the N of the series (any order: run from the smallest).
        new_row: the row of a point before it is measured (what is known without running it).
        skip: given the rows measured so far (at least one) and the next row, the note of a point
            estimated over the budget (setting the row's estimate if it keeps one), else None.
        measure: fills the row; an allocator failure raised here marks it ``OOM``. It should set
            the row's measured fields only once the whole point has run, so an ``OOM`` row holds
            no half-measured values.
        device: where the series runs (CUDA's cache is emptied after an ``OOM``).
        measured_line: the progress line logged after each measured point.

    Returns:
        One row per N, measured or skipped, smallest N first.
    """
    rows: list[P] = []
    measured: list[P] = []
    dead = ""  # set after a real OOM: larger N cannot fit either
    for n in sorted(lengths):
        row = new_row(n)
        rows.append(row)
        if dead:
            row.note = dead
            continue
        note = skip(measured, row) if measured else None
        if note is not None:
            row.note = note
            continue
        try:
            measure(row)
        except (RuntimeError, MemoryError) as err:
            if not is_out_of_memory(err):
                raise
            row.note, dead = "OOM", f"OOM at N={n}"
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        measured.append(row)
        if measured_line is not None:
            log.info(measured_line(row))
    return rows
