"""Paired differences: the t-interval against a hand computation, shared seeds only."""

from __future__ import annotations

import math

import pytest

from attn_lightning.results.paired import paired_delta


def test_interval_matches_a_hand_t_interval():
    variant = {0: 1.0, 1: 2.0, 2: 4.0, 7: 100.0}  # seed 7 has no control: left out
    control = {0: 0.5, 1: 1.0, 2: 1.5, 3: 9.0}
    delta = paired_delta(variant, control)
    assert delta is not None and delta.n == 3
    deltas = [0.5, 1.0, 2.5]
    mean = sum(deltas) / 3
    sd = math.sqrt(sum((d - mean) ** 2 for d in deltas) / 2)
    half = 4.302652729911275 * sd / math.sqrt(3)  # t_{0.975, 2}
    assert delta.mean == pytest.approx(mean)
    assert (delta.low, delta.high) == pytest.approx((mean - half, mean + half))
    assert delta.format(digits=2) == f"+{mean:.2f} [{mean - half:+.2f}, {mean + half:+.2f}] (n=3)"


def test_one_pair_has_no_interval_and_no_pair_gives_none():
    one = paired_delta({0: 2.0}, {0: 3.0})
    assert one is not None and one.format(scale=100, digits=0) == "-100 (n=1)"
    assert paired_delta({0: 1.0}, {1: 1.0}) is None
