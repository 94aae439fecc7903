"""polynomial.md's "What the learned kernels look like" at 600 steps: every coefficient, γ-norm and
b range of the paragraph recomputed from the per-seed, per-layer ``polynomial_len50_learned.csv``
(the best checkpoints of the 20 re-run learned-coefficient runs), and the re-run's agreement
with the committed outcomes (``polynomial_len50_learned_rerun_runs.csv`` against
``polynomial_len50_runs.csv``)."""

from __future__ import annotations

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
EXACT, LINEAR = (
    "polynomial_degree-4_learned_coefficients-true",
    "polysketch_learned_coefficients-true",
)


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _values(variant: str, key: str, layer: str = "") -> list[float]:
    rows = runs("polynomial_len50_learned")
    chosen = [r for r in rows if r["run"].startswith(variant) and f"layers.{layer}" in r["layer"]]
    return [float(r[key]) for r in chosen if r[key]]


def _span(values: list[float], digits: int) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def test_learned_coefficient_ranges_are_the_learned_csv():
    page = _page()
    assert len(_values(EXACT, "a0")) == len(_values(LINEAR, "a0")) == 20  # 10 seeds × 2 layers
    exact = ", ".join(
        _span(_values(EXACT, f"a{i}"), digits) for i, digits in enumerate((2, 2, 2, 2, 3))
    )
    assert f"to a = ({exact}) across both layers and all 10 seeds" in page
    even = ", ".join(_span(_values(LINEAR, f"a{i}"), d) for i, d in ((0, 2), (2, 2), (4, 3)))
    assert f"(a₀, a₂, a₄) = ({even}) over its 10 seeds" in page


def test_gamma_norms_and_b_are_the_learned_csv():
    page = _page()
    gamma = {(v, layer): _span(_values(v, "gamma_norm", layer), 2)
             for v in (EXACT, LINEAR) for layer in "01"}  # fmt: skip
    assert (
        f"to {gamma[(EXACT, '0')]} in layer 0 and {gamma[(EXACT, '1')]} in layer 1 of the exact "
        f"learned polynomial ({gamma[(LINEAR, '0')]} and {gamma[(LINEAR, '1')]} in the "
        "linear-time form)"
    ) in page
    b1 = ", ".join(_span(_values(EXACT, f"b{i}", "1"), 2) for i in range(5))
    assert f"in layer 1, b = ({b1}), the cubic" in page
    start = (1 / 6, 1 / 24)
    times = [v / start[0] for v in _values(EXACT, "b3", "1")] + [
        v / start[1] for v in _values(EXACT, "b4", "1")
    ]
    assert round(min(times)) == 5 and round(max(times)) == 8
    assert "and quartic terms 5–8× their start" in page
    b3, b4 = (_span(_values(EXACT, f"b{i}", "0"), 2) for i in (3, 4))
    assert f"in layer 0, b₃ = {b3} and b₄ = {b4}" in page


def test_rerun_reproduces_the_committed_outcomes():
    page = _page()
    committed = {(r["variant"], r["seed"]): r for r in runs("polynomial_len50_runs")}
    names = {
        "polynomial:degree=4,learned_coefficients=true": EXACT,
        "polysketch:learned_coefficients=true,sketch_size=16": f"{LINEAR}_sketch_size-16",
    }
    rerun = runs("polynomial_len50_learned_rerun_runs")
    assert (
        len(rerun) == 20
        and "the same exact-sequence accuracy on all 20 (variant, seed) pairs" in page
    )
    drift = []
    for row in rerun:
        old = committed[(names[row["backend"]], row["seed"])]
        assert float(row["test/exact_acc"]) == float(old["test/exact_acc"]), row["seed"]
        drift.append(abs(float(row["test/loss"]) / float(old["test/loss"]) - 1))
    assert f"test loss within {100 * max(drift):.2f} % of the committed value on every run" in page
