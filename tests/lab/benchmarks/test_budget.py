"""The shared measurement loop: increasing N, skips over budget, OOM ends the series."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from lab.benchmarks.budget import extrapolate, growth_exponent, run_budgeted

CPU = torch.device("cpu")


@dataclass
class _Row:
    n: int
    note: str = ""
    seconds: float | None = None


def test_growth_exponent_is_clamped_and_safe():
    assert growth_exponent([(8, 1.0)]) == 2.0  # one point: the quadratic bound
    assert growth_exponent([(8, 1.0), (16, 2.9)]) == pytest.approx(math.log2(2.9))
    assert growth_exponent([(8, 1.0), (16, 1.0)]) == 1.0
    assert growth_exponent([(8, 1.0), (16, 64.0)]) == 2.0
    assert growth_exponent([(8, 1.0), (8, 3.0)]) == 2.0  # equal N
    assert growth_exponent([(8, None), (16, 3.0)]) == 2.0
    assert growth_exponent([(8, 0.0), (16, 3.0)]) == 2.0
    assert extrapolate(3.0, 8, 32, 1.5) == pytest.approx(3.0 * 4**1.5)


def test_loop_runs_smallest_first_and_skips_what_the_estimate_rules_out():
    order: list[int] = []
    seen: list[list[int]] = []

    def measure(row: _Row) -> None:
        order.append(row.n)
        row.seconds = row.n / 10

    def skip(measured, row):
        seen.append([r.n for r in measured])
        return "too slow" if row.n == 32 else None

    rows = run_budgeted([64, 8, 32, 16], new_row=_Row, skip=skip, measure=measure, device=CPU)
    assert [r.n for r in rows] == [8, 16, 32, 64]
    assert order == [8, 16, 64]  # a skipped point does not end the series
    assert seen == [[8], [8, 16], [8, 16]]  # the first point is never estimated
    assert rows[2].note == "too slow" and rows[2].seconds is None


def test_an_out_of_memory_error_ends_the_series_and_other_errors_propagate():
    def measure(row: _Row) -> None:
        if row.n >= 16:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2 GiB")
        row.seconds = 1.0

    rows = run_budgeted([8, 16, 32], new_row=_Row, skip=lambda m, r: None, measure=measure,
                        device=CPU)  # fmt: skip
    assert [(r.note, r.seconds) for r in rows] == [("", 1.0), ("OOM", None), ("OOM at N=16", None)]

    def broken(row: _Row) -> None:
        raise RuntimeError("shape mismatch")

    with pytest.raises(RuntimeError, match="shape mismatch"):
        run_budgeted([8], new_row=_Row, skip=lambda m, r: None, measure=broken, device=CPU)
