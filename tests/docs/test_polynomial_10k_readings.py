"""polynomial.md's 10,000-step readings of the thesis's claims ("x⁸ beats softmax", what goes
below softmax, the burst split, "spiky loss curves"), recomputed from
``polynomial_len50_10k_traces_{runs,bursts}.csv`` and ``polynomial_len50_10k_all_paired.csv``."""

from __future__ import annotations

import statistics

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
SOFTMAX, X8, X4 = "softmax", "polynomial_degree-8", "polynomial_degree-4"
LEARNED, SKETCH = "polynomial_degree-4_learned_coefficients-true", "polysketch_sketch_size-64"
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _sci(value: float, digits: int = 1) -> str:
    """``−6.3·10⁻⁸``: the page's exponent notation."""
    mantissa, exponent = f"{value:.{digits}e}".split("e")
    return f"{mantissa}·10{str(int(exponent)).translate(SUPERSCRIPT)}".replace("-", "−", 1)


def _traces(variant: str, key: str) -> dict[int, float]:
    return {int(r["seed"]): float(r[key]) for r in runs("polynomial_len50_10k_traces_runs")
            if r["variant"] == variant}  # fmt: skip


def _bursting(variant: str) -> set[int]:
    return {
        int(b["seed"])
        for b in runs("polynomial_len50_10k_traces_bursts")
        if b["variant"] == variant
    }


def _paired(variant: str) -> str:
    (row,) = [r for r in runs("polynomial_len50_10k_all_paired") if r["variant"] == variant]
    mean, low, high = (float(row[f"Δ test loss {p}"]) for p in ("mean", "low", "high"))
    signs = f"{row['Δ test loss > 0']}+ {row['Δ test loss < 0']}−"
    return f"{_sci(mean)} [{_sci(low)}, {_sci(high)}], {signs}"


def test_x8_against_softmax_is_the_traces_and_paired_csvs():
    page = _page()
    x8, softmax = _traces(X8, "final_train_loss"), _traces(SOFTMAX, "final_train_loss")
    deltas = sorted((x8[s] - softmax[s] for s in x8), key=abs)
    relative = sorted((100 * (x8[s] / softmax[s] - 1) for s in x8), key=abs)
    assert all(d < 0 for d in deltas) and max(x8.values()) < min(softmax.values())
    assert (
        f"(paired Δ {_sci(deltas[0])} to {_sci(deltas[-1])}, {relative[0]:.1f} % to "
        f"{relative[-1]:.1f} %; the two ranges do not overlap)"
    ).replace("-", "−") in page
    (row,) = [r for r in runs("polynomial_len50_10k_all_paired") if r["variant"] == X8]
    per_seed = [float(cell.split()[1]) for cell in row["Δ test loss per seed"].split(", ")]
    quoted = ", ".join(("+" if d > 0 else "") + _sci(d, 2) for d in per_seed)
    assert f"(per-seed Δ {quoted} for seeds 0–4" in page
    lower = [s for s, d in enumerate(per_seed) if d < 0]
    assert sorted(_bursting(X8)) == lower == [1, 3]
    assert "the two lower are x⁸'s two runs with a spike burst (seeds 1 and 3)" in page


def test_what_goes_below_softmax_is_the_traces_and_paired_csvs():
    page = _page()
    test = {v: _traces(v, "test_loss") for v in (SOFTMAX, X4, LEARNED, SKETCH)}
    medians = [_sci(statistics.median(test[v].values())) for v in (X4, LEARNED, SKETCH, SOFTMAX)]
    assert "{}, {} and {} (medians of 5 runs each) against softmax's {}".format(*medians) in page
    assert f"(paired Δ {_paired(X4)}; {_paired(LEARNED)}; PolySketch {_paired(SKETCH)})" in page
    assert (
        f"(x⁴'s seed 3: {_sci(test[X4][3])} against {_sci(test[SOFTMAX][3])}; PolySketch's seed 2: "
        f"{_sci(test[SKETCH][2])} against {_sci(test[SOFTMAX][2])})"
    ) in page
    final = {v: _traces(v, "final_train_loss") for v in (SOFTMAX, X4, LEARNED, SKETCH, X8)}
    x4, sketch = (sorted(final[v].values()) for v in (X4, SKETCH))
    assert f"final training loss {x4[0] / 1e-7:.2f}–{_sci(x4[-1], 2)} (x⁴, all five" in page
    assert f"and {sketch[0] / 1e-7:.2f}–{_sci(sketch[-1], 2)} (PolySketch, all five)" in page
    learned = {s: v for s, v in final[LEARNED].items() if s != 0}
    gaps = [100 * (1 - v / final[SOFTMAX][s]) for s, v in learned.items()]
    assert (
        f"polynomial {min(learned.values()) / 1e-7:.2f}–{_sci(max(learned.values()), 2)} on four "
        f"seeds, {min(gaps):.1f}–{max(gaps):.1f} % below softmax's of the same seed"
    ) in page
    assert f"and {_sci(final[LEARNED][0])} on seed 0" in page
    assert all(final[X4][s] < final[X8][s] for s in range(5))
    test_x8 = _traces(X8, "test_loss")
    assert [s for s in range(5) if test[X4][s] >= test_x8[s]] == [3]


def test_burst_split_is_the_traces_csvs():
    page = _page()
    parts = []
    for variant, label in ((X8, "x⁸"), (X4, "x⁴"), (SKETCH, "PolySketch")):
        final, burst = _traces(variant, "final_train_loss"), _bursting(variant)
        gaps = [100 * (1 - final[b] / final[n]) for b in burst for n in set(final) - burst]
        parts.append(f"{min(gaps):.1f}–{max(gaps):.1f} % ({label})")
        test = _traces(variant, "test_loss")
        assert max(test[b] for b in burst) < min(test[n] for n in set(test) - burst), variant
    assert (
        f"the bursting runs end {parts[0]}, {parts[1]} and {parts[2]} below every burst-free run"
        in page
    )


def test_spiky_loss_counts_are_the_bursts_csv():
    page = _page()
    bursts = runs("polynomial_len50_10k_traces_bursts")
    assert not _bursting(SOFTMAX) and "Softmax: no spike on 5 seeds" in page
    counts = [len(_bursting(v)) for v in (X8, X4, LEARNED, SKETCH)]
    assert (
        "{} of the twenty polynomial-kernel runs (x⁸ {}/5, x⁴ {}/5, learned polynomial {}/5, "
        "PolySketch {}/5) have at least one burst, {} bursts in all"
    ).format("Fifteen" if sum(counts) == 15 else sum(counts), *counts, len(bursts)) in page
    peaks = sorted(float(b["max_loss"]) for b in bursts)
    large = [p for p in peaks if p > 1e-3]
    small = [p for p in peaks if p <= 1e-3]
    assert len(small) == 14 and max(small) < 7.5e-5
    assert (
        f"{len(large)} of them from a loss near 10⁻⁷ up to {large[0]:.2g}–{large[-1]:.2g} "
        "(the other fourteen, 1–4 spikes each, stay below 7.5·10⁻⁵)"
    ) in page
    assert all(int(b["spikes"]) <= 4 for b in bursts if float(b["max_loss"]) <= 1e-3)
