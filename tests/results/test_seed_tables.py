"""Per-seed tables: every seed's value and Δ vs a control, sign counts, an interval only from
five paired seeds up, seeds the control lacks left out of the Δ."""

from __future__ import annotations

import pytest

from attn_lightning.results.records import RunResult
from attn_lightning.results.seed_tables import MIN_INTERVAL_SEEDS, delta_rows, seed_rows

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
    control = [1.0] * MIN_INTERVAL_SEEDS
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
