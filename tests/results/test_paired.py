"""Paired differences: the t-interval against a hand computation, shared seeds only; the per-seed
tables: every seed's value and Δ vs a control, sign counts, an interval only from five paired
seeds up, seeds the control lacks left out of the Δ."""

from __future__ import annotations

import math

import pytest

from attn_lightning.results.paired import (
    MIN_BOOTSTRAP_SEEDS,
    delta_rows,
    paired_delta,
    seed_deltas,
    seed_rows,
)
from attn_lightning.results.records import RunResult


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


def test_seed_deltas_count_signs_and_stay_within_the_observed_range():
    from attn_lightning.results.paired import seed_deltas

    variant = {0: 0.0, 1: 1.0, 2: 0.9, 3: 0.0, 4: 1.0}
    control = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 9: 0.5}
    got = seed_deltas(variant, control)
    assert got is not None and got.n == 5
    assert (got.positive, got.negative, got.zero) == (1, 3, 1)
    assert got.mean == pytest.approx((-1 + 0 - 0.1 - 1 + 0.05) / 5)
    # A t-interval here would reach below −1 (−100 pp); the bootstrap's stays within the Δs.
    assert -1.0 <= got.low < got.mean < got.high <= 0.05
    assert seed_deltas(variant, control) == got  # a fixed bootstrap seed: reproducible
    assert got.format(scale=100).startswith("-41.00 [") and got.format().endswith("(n=5: 1+ 3− 1=)")
    assert got.per_seed(scale=100).startswith("s0 -100.00, s1 +0.00")
    assert seed_deltas({0: 1.0}, {1: 1.0}) is None
    one = seed_deltas({0: 0.5}, {0: 0.25})
    assert one is not None and one.format() == "+0.25 (n=1: 1+ 0− 0=)"


def test_fewer_than_five_seeds_get_a_t_interval_not_a_bootstrap():
    # At n = 3 a percentile bootstrap is about [min Δ, max Δ] (~75 % coverage); the t-interval
    # with 2 degrees of freedom is the hand computation of the first test.
    variant = {0: 1.0, 1: 2.0, 2: 4.0}
    control = {0: 0.5, 1: 1.0, 2: 1.5}
    got = seed_deltas(variant, control)
    t = paired_delta(variant, control)
    assert got is not None and t is not None and got.method == "t"
    assert (got.low, got.high) == pytest.approx((t.low, t.high))
    assert got.low < 0.5 and got.high > 2.5  # wider than the observed Δs, as it should be
    assert got.format(digits=2).endswith("(n=3, t: 3+ 0− 0=)")
    four = seed_deltas({s: float(s) for s in range(4)}, dict.fromkeys(range(4), 0.0))
    assert four is not None and four.method == "t"
    five = seed_deltas({s: float(s) for s in range(5)}, dict.fromkeys(range(5), 0.0))
    assert five is not None and five.method == "bootstrap" and "t:" not in five.format()


def test_deltas_below_the_shown_decimals_get_significant_figures():
    tiny = seed_deltas({0: 2e-8, 1: 3e-8}, {0: 5e-8, 1: 4e-8})
    assert tiny.format(digits=5).startswith("-2.00e-08 [")
    assert tiny.per_seed(digits=5) == "s0 -3.00e-08, s1 -1.00e-08"
    assert seed_deltas({0: 1.0}, {0: 0.5}).format(digits=2) == "+0.50 (n=1: 1+ 0− 0=)"


KEY = "test/bits_per_dim"


def _runs(values: dict[str, list[float]], *, crashed: tuple[str, int] | None = None) -> list:
    runs = []
    for name, per_seed in values.items():
        for seed, value in enumerate(per_seed):
            status = "crashed" if crashed == (name, seed) else "ok"
            metrics = {} if status == "crashed" else {KEY: value}
            runs.append(RunResult(name, seed, 100.0 + seed, status, metrics))
    return runs


def test_seed_rows_list_every_finished_seed_with_mean_and_std():
    runs = _runs({"softmax": [1.0, 1.2, 1.4], "linear": [2.0, 9.0, 2.2]}, crashed=("linear", 1))
    rows = seed_rows(runs, ["softmax", "linear"], [KEY], label="backend")
    assert rows[0]["test bits/dim (mean ± std)"] == "1.2000 ± 0.2000"
    assert rows[0]["test bits/dim, per seed"] == "1.0000 / 1.2000 / 1.4000"
    assert rows[0]["fit time (s), per seed"] == "100 / 101 / 102"
    assert rows[1]["seeds"] == "0 2"  # the crashed seed 1 is not a value
    assert rows[1]["test bits/dim, per seed"] == "2.0000 / 2.2000"


def test_delta_rows_sign_counts_and_no_interval_below_five_seeds():
    runs = _runs({"softmax": [1.0, 1.0, 1.0], "linear": [1.5, 0.5, 1.0]})
    (row,) = delta_rows(runs, ["softmax", "linear"], "softmax", [KEY], label="backend")
    assert row["backend − softmax, paired by seed"] == "linear"
    assert row["test bits/dim Δ per seed"] == "+0.5000 / -0.5000 / +0.0000"
    assert row["test bits/dim sign count"] == "1+ 1− of 3 (1 equal)"
    assert row["test bits/dim mean Δ [95 % bootstrap]"] == "+0.0000 (n = 3: no interval)"


def test_delta_rows_give_a_bootstrap_interval_inside_the_observed_deltas_from_five_seeds():
    control = [1.0] * MIN_BOOTSTRAP_SEEDS
    variant = [1.1, 1.3, 1.2, 1.4, 1.25]
    runs = _runs({"softmax": control, "polysketch": variant})
    (row,) = delta_rows(runs, ["softmax", "polysketch"], "softmax", [KEY], label="backend")
    cell = row["test bits/dim mean Δ [95 % bootstrap]"]
    mean, interval = cell.split(" [")
    low, high = (float(x) for x in interval.rstrip("]").split(", "))
    assert float(mean) == pytest.approx(0.25)
    assert 0.1 <= low < float(mean) < high <= 0.4
    assert row["test bits/dim sign count"] == "5+ 0− of 5"


def test_delta_rows_pair_only_seeds_both_finished():
    runs = _runs({"softmax": [1.0, 1.0], "linear": [2.0, 3.0]}, crashed=("softmax", 1))
    (row,) = delta_rows(runs, ["softmax", "linear"], "softmax", [KEY], label="backend")
    assert row["test bits/dim Δ per seed"] == "+1.0000"
    assert row["test bits/dim sign count"] == "1+ 0− of 1"
