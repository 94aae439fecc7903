"""polynomial.md's 10,000-step section: the cost per run, the one-step cost ratios, and the
"every run converged" and "above 99 % at the first validation but one" readings, recomputed from
``polynomial_len50_10k{_runs,_continued_runs,_step_cost}.csv``."""

from __future__ import annotations

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
VARIANTS = {
    "softmax": "softmax",
    "x⁸": "polynomial_degree-8",
    "x⁴": "polynomial_degree-4",
    "learned polynomial": "polynomial_degree-4_learned_coefficients-true",
    "PolySketch r = 64": "polysketch_sketch_size-64",
}


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _finished(name: str) -> list[dict[str, str]]:
    return [r for r in runs(name) if r["status"] == "ok"]


def _minutes(rows: list[dict[str, str]], variant: str) -> list[float]:
    return [float(r["fit_seconds"]) / 60 for r in rows if r["variant"] == variant]


def _span(values: list[float]) -> str:
    low, high = f"{min(values):.0f}", f"{max(values):.0f}"
    return low if low == high else f"{low}–{high}"


def test_cost_per_run_is_the_runs_csvs():
    page = _page()
    first, second = (
        _finished("polynomial_len50_10k_runs"),
        _finished("polynomial_len50_10k_continued_runs"),
    )
    first_span, second_span = (
        {label: _span(_minutes(rows, v)) for label, v in VARIANTS.items()}
        for rows in (first, second)
    )
    quoted = ", ".join(f"{label} {first_span[label]} min" for label in list(VARIANTS)[:4])
    sketch = first_span["PolySketch r = 64"]
    assert f"each: {quoted}, PolySketch r = 64 (random sketch) {sketch} min" in page
    powers = _span(_minutes(second, VARIANTS["x⁸"]) + _minutes(second, VARIANTS["x⁴"]))
    assert (
        f"softmax {second_span['softmax']} min, x⁸ and x⁴ {powers} min, the learned polynomial "
        f"{second_span['learned polynomial']} min, "
        f"PolySketch {second_span['PolySketch r = 64']} min"
    ) in page


def test_step_cost_ratios_are_the_step_cost_csv():
    page = _page()
    rate = {r["backend"]: float(r["tokens_per_s"]) for r in runs("polynomial_len50_10k_step_cost")}
    softmax = rate["softmax"]
    powers = sorted(rate[f"polynomial:degree={p}"] / softmax for p in (4, 8))
    learned = rate["polynomial:degree=4,learned_coefficients=true"] / softmax
    sketch = rate["polysketch:sketch_size=64"] / softmax
    sketch_learned = rate["polysketch:sketch=learned,sketch_size=64"] / softmax
    assert (
        f"softmax {softmax / 1000:.0f}k tokens/s, x⁴ and x⁸ {powers[0]:.2f}–{powers[1]:.2f}×, the "
        f"learned polynomial {learned:.2f}×, PolySketch r = 64 with the random sketch {sketch:.2f}×"
    ) in page
    assert f"with the learned sketch **{sketch_learned:.3f}×" in page
    (row,) = [r for r in runs("polynomial_len50_10k_step_cost")
              if r["backend"] == "polysketch:sketch=learned,sketch_size=64"]  # fmt: skip
    assert f"are {100 * float(row['attn_share']):.0f} % of the step" in page


def test_every_run_converged_and_all_but_one_at_the_first_validation():
    page = _page()
    rows = _finished("polynomial_len50_10k_runs") + _finished("polynomial_len50_10k_continued_runs")
    assert len(rows) == 25 and "**every one of the 25 runs converged, 100 %" in page
    assert all(float(r["test/token_acc"]) == float(r["test/exact_acc"]) == 1.0 for r in rows)
    late = [r for r in rows if r["steps_to_threshold"] != "249"]
    assert [(r["variant"], r["seed"], r["steps_to_threshold"]) for r in late] == [
        (VARIANTS["PolySketch r = 64"], "1", "499")
    ]
    assert (
        "(step 250; PolySketch's seed 1 at the second, step 500: `steps_to_threshold` 499" in page
    )
