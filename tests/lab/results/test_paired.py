"""Paired differences: the t-interval against a hand computation and its coverage by simulation,
the exact sign test, shared seeds only; the per-seed tables: every seed's value and Δ vs a
control, sign counts, seeds the control lacks left out of the Δ; the ``paired`` page's errors
(the committed page is rebuilt from its records in tests/docs/test_plan_pages.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from lab.results.paired import (
    delta_rows,
    detectable_effect,
    format_p,
    holm,
    paired_delta,
    seed_deltas,
    seed_rows,
    sign_test,
    t_interval,
    t_test,
    write_paired,
)
from lab.results.records import RunResult
from lab.studies.sweep import main


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


def test_seed_deltas_count_signs_and_give_the_t_interval_and_sign_test():
    variant = {0: 0.0, 1: 1.0, 2: 0.9, 3: 0.0, 4: 1.0}
    control = {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 0.95, 9: 0.5}
    got = seed_deltas(variant, control)
    assert got is not None and got.n == 5
    assert (got.positive, got.negative, got.zero) == (1, 3, 1)
    assert got.mean == pytest.approx((-1 + 0 - 0.1 - 1 + 0.05) / 5)
    # The honest width at n = 5 of a bimodal Δ runs below −1 (−100 pp): no narrower interval.
    assert (got.low, got.high) == pytest.approx(t_interval([-1.0, 0.0, -0.1, -1.0, 0.05]))
    assert got.low < -1.0 < got.mean < 0.05 < got.high
    assert got.sign_p == pytest.approx(2 * (1 + 4) / 16)  # 1 of 4 nonzero positive
    assert got.format(scale=100).startswith("-41.00 [")
    assert got.format().endswith("(n=5: 1+ 3− 1=, sign p 0.62)")
    assert got.per_seed(scale=100).startswith("s0 -100.00, s1 +0.00")
    assert seed_deltas({0: 1.0}, {1: 1.0}) is None
    one = seed_deltas({0: 0.5}, {0: 0.25})
    assert one is not None and one.format() == "+0.25 (n=1: 1+ 0− 0=)"


def test_the_sign_test_is_the_exact_binomial():
    assert sign_test(5, 0) == pytest.approx(2 / 32)
    assert sign_test(0, 5) == pytest.approx(2 / 32)
    assert sign_test(4, 1) == pytest.approx(12 / 32)
    assert sign_test(3, 3) == 1.0 and sign_test(0, 0) == 1.0
    assert sign_test(10, 0) == pytest.approx(2 / 1024)


def _percentile_bootstrap_covers(x: np.ndarray, mu: float, rng, resamples: int = 1000) -> bool:
    means = np.sort(x[rng.integers(0, len(x), (resamples, len(x)))].mean(axis=1))
    return bool(
        means[round(0.025 * (resamples - 1))] <= mu <= means[round(0.975 * (resamples - 1))]
    )


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_t_interval_covers_95_percent_where_a_percentile_bootstrap_does_not(n):
    # docs/statistics.md: the larger simulation. Here 2,000 normal samples (standard error of a
    # coverage near 95 %: 0.49 pp) and 600 for the bootstrap, which covers ~75 / 83 / 90 %.
    rng = np.random.default_rng(n)
    samples = rng.normal(0.3, 1.0, size=(2000, n))
    covered = [low <= 0.3 <= high for low, high in map(t_interval, samples.tolist())]
    assert 0.93 <= float(np.mean(covered)) <= 0.97
    boot = np.mean([_percentile_bootstrap_covers(x, 0.3, rng) for x in samples[:600]])
    assert boot < 0.925  # the reason the pages left it: well under the 95 % it would claim


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


def test_delta_rows_sign_counts_and_a_t_interval_at_any_n():
    runs = _runs({"softmax": [1.0, 1.0, 1.0], "linear": [1.5, 0.5, 1.0]})
    (row,) = delta_rows(runs, ["softmax", "linear"], "softmax", [KEY], label="backend")
    assert row["backend − softmax, paired by seed"] == "linear"
    assert row["test bits/dim Δ per seed"] == "+0.5000 / -0.5000 / +0.0000"
    assert row["test bits/dim sign count"] == "1+ 1− of 3 (1 equal), sign p 1.00"
    low, high = t_interval([0.5, -0.5, 0.0])
    assert row["test bits/dim mean Δ [95 % t]"] == f"+0.0000 [{low:+.4f}, {high:+.4f}]"


def test_delta_rows_give_the_t_interval_from_five_seeds():
    control = [1.0] * 5
    variant = [1.1, 1.3, 1.2, 1.4, 1.25]
    runs = _runs({"softmax": control, "polysketch": variant})
    (row,) = delta_rows(runs, ["softmax", "polysketch"], "softmax", [KEY], label="backend")
    cell = row["test bits/dim mean Δ [95 % t]"]
    mean, interval = cell.split(" [")
    low, high = (float(x) for x in interval.rstrip("]").split(", "))
    assert float(mean) == pytest.approx(0.25)
    expected = t_interval([0.1, 0.3, 0.2, 0.4, 0.25])
    assert (low, high) == pytest.approx(expected, abs=1e-4)
    assert row["test bits/dim sign count"] == "5+ 0− of 5, sign p 0.06"
    deltas = [0.1, 0.3, 0.2, 0.4, 0.25]
    # t = 0.25 / (0.112 / √5) = 5.0 on 4 degrees of freedom: p ≈ 0.0075
    assert float(row["test bits/dim t p"]) == pytest.approx(t_test(deltas), abs=1e-3)
    assert t_test(deltas) == pytest.approx(0.0075, abs=2e-4)
    effect = float(row["test bits/dim detectable Δ, 80 % power"])
    assert effect == pytest.approx(detectable_effect(deltas), abs=1e-4)


def test_delta_rows_pair_only_seeds_both_finished():
    runs = _runs({"softmax": [1.0, 1.0], "linear": [2.0, 3.0]}, crashed=("softmax", 1))
    (row,) = delta_rows(runs, ["softmax", "linear"], "softmax", [KEY], label="backend")
    assert row["test bits/dim Δ per seed"] == "+1.0000"
    assert row["test bits/dim sign count"] == "1+ 0− of 1"
    assert row["test bits/dim t p"] == row["test bits/dim detectable Δ, 80 % power"] == "–"


DOCS = Path(__file__).resolve().parents[3] / "docs" / "results"
RUNS = DOCS / "image28_mnist5k" / "runs"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"control": "flash"}, "has no runs of ['flash']"),
        ({"variants": ["softmax", "liner"]}, "has no runs of ['liner']"),
        ({"metrics": ["test/acc"]}, "has no metric ['test/acc']"),
    ],
)
def test_a_name_or_metric_the_records_lack_is_an_error_naming_what_they_have(
    tmp_path, options, message
):
    with pytest.raises(ValueError, match=r"softmax|test/bits_per_dim") as error:
        write_paired([RUNS], tmp_path / "t", command="x", **options)
    assert message in str(error.value)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_a_plan_page_over_a_folder_without_records_is_an_error_naming_it(tmp_path, capsys):
    plan = tmp_path / "p.yaml"
    page = f"{{report: paired, runs: [{tmp_path / 'none'}]}}"
    plan.write_text(f"config: [base.yaml]\nbackends: [softmax]\npages:\n  p: {page}\n")
    with pytest.raises(SystemExit):
        main(["--plan", str(plan), "--out", str(tmp_path / "p"), "--report-only"])
    assert f"page p: no run records (record.json) under `{tmp_path / 'none'}/`" in (
        capsys.readouterr().err
    )


def test_detectable_effect_is_detected_at_about_its_power():
    # Δ with sd 1 around the effect named for sd 1: the t-test rejects about 80 % of the time
    # (the formula approximates the noncentral t; exact: 0.79).
    rng = np.random.default_rng(1)
    unit = np.array([-1.2, -0.5, 0.0, 0.6, 1.1])
    effect = detectable_effect((unit / unit.std(ddof=1)).tolist())
    rejected = [t_test((effect + row).tolist()) < 0.05 for row in rng.normal(0, 1, (2000, 5))]
    assert 0.70 <= float(np.mean(rejected)) <= 0.88
    assert detectable_effect((3 * unit).tolist()) == pytest.approx(3 * effect * unit.std(ddof=1))
    with pytest.raises(ValueError, match="at least 2 values, got 1"):
        detectable_effect([1.0])


def test_t_test_agrees_with_the_interval():
    values = [0.1, 0.3, 0.2, 0.4, 0.25]
    assert t_interval(values)[0] > 0 and t_test(values) < 0.05
    assert t_interval([0.5, -0.5, 0.1])[0] < 0 < t_interval([0.5, -0.5, 0.1])[1]
    assert t_test([0.5, -0.5, 0.1]) > 0.05
    assert t_test([0.0, 0.0]) == 1.0 and t_test([1.0, 1.0]) == 0.0
    assert (format_p(0.0297), format_p(5.2e-8)) == ("0.030", "5e-08")


def test_holm_steps_down_and_stops_at_the_first_failure():
    # thresholds 0.05/4, /3, /2, /1 in order of p: 0.001 ≤ 0.0125 kept, 0.013 ≤ 0.0167 kept,
    # 0.03 > 0.025 stops, so 0.04 (≤ 0.05 on its own) is not kept either.
    got = holm({"d": 0.04, "a": 0.001, "c": 0.03, "b": 0.013})
    assert list(got) == ["a", "b", "c", "d"]
    assert [t for t, _ in got.values()] == pytest.approx([0.0125, 0.05 / 3, 0.025, 0.05])
    assert [kept for _, kept in got.values()] == [True, True, False, False]
    assert all(kept for _, kept in holm({"a": 0.001, "b": 0.02, "c": 0.001}).values())
