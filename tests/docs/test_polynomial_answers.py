"""polynomial.md's "Answers" at length 50 (600 steps, 10 seeds), recomputed from the committed
CSVs: converged counts and the largest gradient norms (``polynomial_len50_runs.csv``) and every
paired interval the paragraphs quote (``polynomial_len50{,_sketch,_norm_p2,_norm_p4,_norm_p8}
_paired.csv``)."""

from __future__ import annotations

import pytest

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
LOSS, EXACT, STEPS = "Δ test loss", "Δ exact-seq acc (pp)", "Δ steps to threshold"


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _row(name: str, variant: str) -> dict[str, str]:
    (row,) = [r for r in runs(name) if r["variant"] == variant]
    return row


def _interval(row: dict[str, str], key: str, digits: int, *, unsigned: bool = False) -> str:
    """``−8.0 [−8.8, −7.2]``; ``unsigned``: the size of a Δ that the sentence gives a direction
    in words ("45 [35, 50] steps sooner", "120 [95, 145] steps later")."""
    mean, low, high = (float(row[f"{key} {p}"]) for p in ("mean", "low", "high"))
    if unsigned:
        low, high = sorted((abs(low), abs(high)))
        return f"{abs(mean):.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"
    spec = f"+.{digits}f"
    return f"{mean:{spec}} [{low:{spec}}, {high:{spec}}]".replace("-", "−")


def _signs(row: dict[str, str], key: str) -> tuple[int, int, int]:
    return int(row[f"{key} > 0"]), int(row[f"{key} < 0"]), int(row[f"{key} = 0"])


P, SKETCH = "polynomial_len50_paired", "polynomial_len50_sketch_paired"
NORM = "polynomial_len50_norm_p{}_paired"
LEARNED, LEARNED_LINEAR = (
    "polynomial_degree-4_learned_coefficients-true",
    "polysketch_learned_coefficients-true_sketch_size-16",
)
R16, R64 = "polysketch_sketch_size-16", "polysketch_sketch_size-64"
QUOTED = [
    (P, LEARNED, STEPS, 0, True, "(10/10, and {} steps sooner than softmax to 99 %"),
    (P, "polynomial_degree-2", EXACT, 1, False, "(paired Δ {} pp, n = 10, lower on all 10)"),
    (P, R16, EXACT, 1, False, "{} pp against softmax, n = 10, lower on all 10"),
    (P, R64, EXACT, 2, False, "({} pp against softmax, one seed lower, nine tied"),
    (SKETCH, R64, EXACT, 1, False, "on the same 10 seeds {} pp exact sequences, higher on all 10"),
    (SKETCH, R64, STEPS, 0, True, "and {} steps sooner to 99 % over the 7 seeds"),
    (SKETCH, "polysketch_sketch-learned_sketch_size-16", EXACT, 1, False,
     "{} pp over the random sketch, paired, higher on 7 of 10"),
    (SKETCH, "polysketch_sketch_size-16_local_block-16", EXACT, 1, False,
     "{} pp over the plain r = 16 sketch, higher on 5 of 10"),
    (P, LEARNED_LINEAR, EXACT, 1, False, "{} pp against softmax, lower on all 10, and"),
    (P, LEARNED_LINEAR, STEPS, 0, True, "lower on all 10, and {} steps later to 99 %"),
    (NORM.format(2), "polynomial_degree-2", LOSS, 4, False, "{} (p = 2, lower on 10/10)"),
    (NORM.format(4), "polynomial_degree-4", LOSS, 5, False, "{} (p = 4, 10/10)"),
    (NORM.format(8), "polynomial_degree-8", LOSS, 5, False, "{} (p = 8, 9/10)"),
    (NORM.format(2), "polynomial_degree-2", EXACT, 1, False,
     "for p = 2 also {} pp exact sequences (higher on 9/10)"),
    (P, "polynomial_degree-8", LOSS, 5, False,
     "p = 8 − softmax = {} with normalisation, lower than softmax's on **5 of 10 seeds**"),
    (P, "polynomial_degree-8_normalize-false", LOSS, 5, False,
     "and {} without it, higher on 10 of 10"),
    (P, "polynomial_degree-8", STEPS, 0, True,
     "reaches 99 % validation accuracy {} steps earlier (n = 10: earlier on 6, tied on 4)"),
    (P, LEARNED, LOSS, 5, False, "10 of 10, by {} — a small margin"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "variant", "key", "digits", "unsigned", "quoted"), QUOTED)
def test_paired_readings_are_the_paired_csvs(name, variant, key, digits, unsigned, quoted):
    cell = _interval(_row(name, variant), key, digits, unsigned=unsigned)
    assert quoted.format(cell) in _page(), (name, variant, key)


def test_paired_sign_counts_are_the_paired_csvs():
    def signs(name: str, variant: str, key: str) -> tuple[int, int, int]:
        return _signs(_row(name, variant), key)

    paired = "polynomial_len50_paired"
    assert signs(paired, "polynomial_degree-4_learned_coefficients-true", STEPS) == (0, 9, 1)
    assert signs(paired, "polynomial_degree-2", EXACT) == (0, 10, 0)
    assert signs(paired, "polysketch_sketch_size-64", EXACT) == (0, 1, 9)
    assert signs(paired, "polynomial_degree-8", LOSS) == (5, 5, 0)
    assert signs(paired, "polynomial_degree-8", STEPS) == (0, 6, 4)
    assert signs(paired, "polynomial_degree-8_normalize-false", LOSS) == (10, 0, 0)
    sketch = "polynomial_len50_sketch_paired"
    assert signs(sketch, "polysketch_sketch-learned_sketch_size-16", EXACT)[0] == 7
    assert signs(sketch, "polysketch_sketch_size-16_local_block-16", EXACT)[0] == 5
    assert signs("polynomial_len50_norm_p2_paired", "polynomial_degree-2", STEPS) == (0, 4, 6)
    assert signs("polynomial_len50_norm_p8_paired", "polynomial_degree-8", LOSS)[1] == 9
    fewer = [-float(_row(NORM.format(p), f"polynomial_degree-{p}")[f"{STEPS} mean"])
             for p in (2, 4, 8)]  # fmt: skip
    page = _page()
    p2 = _interval(_row(NORM.format(2), "polynomial_degree-2"), STEPS, 0, unsigned=True)
    assert f"and {p2} fewer steps to 99 % (fewer on 4, tied on 6)" in page
    assert f"for p = 4 and 8, {fewer[1]:.0f} and {fewer[2]:.0f} fewer steps" in page


def test_converged_counts_and_gradient_norms_are_the_runs_csv():
    page, rows = _page(), runs("polynomial_len50_runs")
    by: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by.setdefault(row["variant"], []).append(row)
    assert len(rows) == 130 and "Over all 130 runs" in page
    assert all(int(r["spikes"]) == 0 for r in rows)
    converged = {v: sum(float(r["test/token_acc"]) >= 0.99 for r in rs) for v, rs in by.items()}
    assert (
        converged["polysketch_sketch_size-16"] == 7 and "**r = 16 converged on 7/10 seeds**" in page
    )
    assert converged["polysketch_sketch-learned_sketch_size-16"] == 8 and "converged 8/10**" in page
    assert converged["polysketch_sketch_size-16_local_block-16"] == 8
    exact = [v for v in by if v.startswith("polynomial_degree")]
    assert all(converged[v] == 10 for v in [*exact, "softmax", "polysketch_sketch_size-64"])

    def grad(*variants: str) -> str:
        norms = [float(r["max_grad_norm"]) for v in variants for r in by[v]]
        return f"{min(norms):.1f}–{max(norms):.1f}"

    powers = [v for v in exact if "learned" not in v]
    assert f"was {grad('softmax')} for softmax, {grad(*powers)} for the exact power kernels" in page
    assert f"{grad(R64)} for the random sketch at r = 64 and {grad(R16)} at r = 16" in page
    assert f"{grad(LEARNED_LINEAR)} for the linear-time learned polynomial" in page
    learned = by["polysketch_sketch-learned_sketch_size-16"]
    top = max(learned, key=lambda r: float(r["max_grad_norm"]))
    assert (
        f"and {grad('polysketch_sketch-learned_sketch_size-16')} for the learned sketch, whose"
        in page
    )
    token = 100 * float(top["test/token_acc"])
    assert (
        f"is seed {top['seed']} — one of its two runs that did not converge ({token:.1f} % token"
        in page
    )
