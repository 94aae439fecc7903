"""polynomial.md's length-256 readings (5 seeds, 1,000 steps), recomputed from
``polynomial_len256{_runs,_curves,_paired}.csv`` and, for the comparison with the earlier page,
``sequence_reversal_len256_a_runs.csv``."""

from __future__ import annotations

import statistics

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
P4, LEARNED = "polynomial_degree-4", "polynomial_degree-4_learned_coefficients-true"
R64, SOFTMAX = "polysketch_sketch_size-64", "softmax"


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _pct(variant: str, key: str) -> list[float]:
    """``key`` × 100 of ``variant``'s runs, in seed order."""
    rows = sorted((r for r in runs("polynomial_len256_runs") if r["variant"] == variant),
                  key=lambda r: int(r["seed"]))  # fmt: skip
    return [100 * float(r[key]) for r in rows]


def _span(values: list[float], digits: int = 0) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def _paired(variant: str, key: str, digits: int) -> str:
    (row,) = [r for r in runs("polynomial_len256_paired") if r["variant"] == variant]
    mean, low, high = (float(row[f"{key} {p}"]) for p in ("mean", "low", "high"))
    return f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]".replace("-", "−")


def test_transition_readings_are_the_runs_and_curves():
    page = _page()
    token = {v: _pct(v, "test/token_acc") for v in (P4, LEARNED, SOFTMAX)}
    missed = sorted(t for t in token[LEARNED] if t < 99)
    assert (
        f"the learned polynomial on 3/5 (its other two at {missed[1]:.1f} % and {missed[0]:.1f} %)"
        in page
    )
    at_500 = {
        v: [100 * float(r["val/token_acc"]) for r in runs("polynomial_len256_curves")
            if r["variant"] == v and r["optimizer_steps"] == "500"]
        for v in (SOFTMAX, P4, LEARNED)
    }  # fmt: skip
    softmax, p4, learned = (_span(at_500[v]) for v in (SOFTMAX, P4, LEARNED))
    assert (
        f"At step 500 every softmax run was at {softmax} % validation token accuracy, "
        f"p = 4 at {p4} % and the learned polynomial at {learned} %"
    ) in page
    assert (
        f"(p = 4 {token[P4][1]:.1f} %, learned {token[LEARNED][1]:.1f} %, softmax "
        f"{token[SOFTMAX][1]:.1f} %)"
    ) in page
    at_1000 = [100 * float(r["val/token_acc"]) for r in runs("polynomial_len256_curves")
               if r["variant"] == R64 and r["optimizer_steps"] == "1000"]  # fmt: skip
    assert f"still rising at step 1,000 on every seed ({_span(at_1000)} %)" in page


def test_precision_readings_are_the_runs_and_paired_csvs():
    page = _page()
    token, exact = ({v: _pct(v, k) for v in (P4, LEARNED, SOFTMAX)}
                    for k in ("test/token_acc", "test/exact_acc"))  # fmt: skip

    def converged(variant: str, values: dict[str, list[float]]) -> list[float]:
        return [x for t, x in zip(token[variant], values[variant], strict=True) if t >= 99]

    assert (
        f"The converged p = 4 runs are at {_span(converged(P4, token), 1)} % token accuracy" in page
    )
    assert (
        f"over 256 output tokens is {_span(converged(P4, exact))} % exactly reversed sequences"
        in page
    )
    assert f"({statistics.median(exact[P4]):.1f} % the median over all five runs)" in page
    assert f"the learned polynomial's {_span(converged(LEARNED, exact))} %, against" in page
    median = statistics.median(exact[SOFTMAX])
    assert f"{_span(converged(SOFTMAX, exact))} % for softmax (median {median:.1f} %)" in page
    exact_key, token_key = "Δ exact-seq acc (pp)", "Δ token acc (pp)"
    assert f"p = 4 {_paired(P4, exact_key, 1)} pp, lower on 4 of 5 seeds" in page
    assert f"learned polynomial {_paired(LEARNED, exact_key, 1)} pp, lower on 4, tied on 1" in page
    p4_token, learned_token = (_paired(v, token_key, 1) for v in (P4, LEARNED))
    assert f"Token accuracy: {p4_token} pp (p = 4) and {learned_token} pp (learned)" in page
    seed1 = [t[1] - token[SOFTMAX][1] for t in (token[P4], token[LEARNED])]
    assert f"the mean carried by seed 1 alone (+{seed1[0]:.1f} / +{seed1[1]:.1f} pp)" in page
    assert "exact sequences against softmax, lower on 4 of 5" in page
    assert f"{_paired(R64, exact_key, 1)} pp exact sequences against softmax" in page


def test_gradient_norms_and_earlier_runs_are_the_runs_csvs():
    page = _page()
    rows = runs("polynomial_len256_runs")
    assert len(rows) == 20 and all(int(r["spikes"]) == 0 for r in rows)
    grads = {
        v: [float(r["max_grad_norm"]) for r in rows if r["variant"] == v]
        for v in (SOFTMAX, P4, R64, LEARNED)
    }
    spans = [_span(g, 1) for g in grads.values()]
    assert (
        "pre-clip gradient norms are {} (softmax), {} (p = 4), {} (r = 64) and {} (learned "
        "polynomial)"
    ).format(*spans) in page
    earlier = [
        r
        for r in runs("sequence_reversal_len256_a_runs")
        if r["backend"] == "polynomial:norm=fixed"
    ]
    token, exact = (
        [100 * float(r[k]) for r in earlier] for k in ("test/token_acc", "test/exact_acc")
    )
    assert (
        f"({statistics.fmean(token):.2f} ± {statistics.stdev(token):.2f} % token, "
        f"{statistics.fmean(exact):.1f} ± {statistics.stdev(exact):.1f} % exact)"
    ) in page
