"""image_completion.md's mnist5k readings (the top section), recomputed from the committed CSVs:
the pilot's validation path and plateau means (``image28_mnist5k_pilot_curves.csv``), the study's
mean Δ and spreads (``image28_mnist5k_runs.csv``) and its distance from a plateau
(``image28_mnist5k_curves.csv``)."""

from __future__ import annotations

import statistics

from tests.docs.pages import RESULTS, runs

PAGE = "image_completion.md"
BACKENDS = {
    "softmax": "softmax",
    "linear": "linear",
    "Performer": "performer",
    "PolySketch": "polysketch",
}
BPD = "test/bits_per_dim"


def values(rows: list[dict[str, str]], variant: str, key: str) -> list[float]:
    """``key`` of ``variant``'s finished runs, in seed order (this study names ``variant``)."""
    chosen = [r for r in rows if r["variant"] == variant and r["status"] == "ok"]
    return [float(r[key]) for r in sorted(chosen, key=lambda r: int(r["seed"]))]


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def test_pilot_path_and_plateau_means_are_its_curves():
    page = _page()
    val = {int(r["optimizer_steps"]): float(r["val_bits_per_dim"])
           for r in runs("image28_mnist5k_pilot_curves")}  # fmt: skip
    steps = sorted(val)
    best = min(val, key=val.__getitem__)
    assert best == 2000 and steps[-1] == 4498
    early = ", ".join(f"{val[s]:.2f} ({s:,})" for s in (250, 500, 1000, 1500))
    late = ", ".join(f"{val[s]:.2f}" for s in steps if s > best)
    assert (
        f"Validation bits/dim: {early}, **{val[best]:.2f} ({best:,}, best)**, then {late} "
        f"(2,250 … {steps[-1]:,})"
    ) in page
    assert f"stopped after 22 minutes ({steps[-1]:,} steps)" in page
    means = []
    for first in (1000, 2000, 3000, 4000):
        window = [s for s in steps if first <= s < first + 1000]
        means.append(f"{statistics.fmean(val[s] for s in window):.3f} ({first:,}–{window[-1]:,})")
    assert f"{means[0].replace('(', '(steps ')}, {', '.join(means[1:])}" in page


def test_study_mean_deltas_are_its_runs_csv():
    page, per_run = _page(), runs("image28_mnist5k_runs")
    softmax = values(per_run, "softmax", BPD)
    quoted = {}
    for label in ("linear", "Performer", "PolySketch"):
        ours = values(per_run, BACKENDS[label], BPD)
        deltas = [o - s for o, s in zip(ours, softmax, strict=True)]
        assert all(d > 0 for d in deltas), label
        mean = statistics.fmean(deltas)
        quoted[label] = (f"+{mean:.3f}", f"(+{100 * mean / statistics.fmean(softmax):.1f} %")
    (linear, linear_pct), (performer, performer_pct), (sketch, sketch_pct) = quoted.values()
    assert (
        f"Mean Δ: linear {linear} bits/dim {linear_pct}), Performer {performer} {performer_pct}), "
        f"PolySketch {sketch} {sketch_pct}, the widest spread: +0.0003 on seed 1)"
    ) in page
    polysketch = values(per_run, "polysketch", BPD)
    assert f"{polysketch[1] - softmax[1]:+.4f}" == "+0.0003"
    spread = sorted(
        statistics.stdev(values(per_run, b, BPD)) for b in ("linear", "performer", "polysketch")
    )
    assert f"the seed spread (std {spread[0]:.3f}–{spread[-1]:.3f})" in page
    linear = values(per_run, "linear", BPD)
    gaps = [100 * (lin / s - 1) for lin, s in zip(linear, softmax, strict=True)]
    assert f"(+1.2 %, per seed +{min(gaps):.1f} … +{max(gaps):.1f} %)" in page
    furthest = max(
        abs(v - statistics.fmean(values(per_run, b, BPD)))
        for b in BACKENDS.values()
        for v in values(per_run, b, BPD)
    )
    assert furthest < 0.04 and "every run within 0.04 bits/dim of its backend's mean" in page


def test_plateau_reading_is_the_study_curves():
    page = _page()
    at: dict[tuple[str, int], dict[int, float]] = {}
    for r in runs("image28_mnist5k_curves"):
        at.setdefault((r["variant"], int(r["seed"])), {})[int(r["optimizer_steps"])] = float(
            r["val/bits_per_dim"]
        )

    def window(curve: dict[int, float], low: int, high: int) -> float:
        return statistics.fmean(v for s, v in curve.items() if low <= s <= high)

    parts = []
    for label, backend in BACKENDS.items():
        seeds = [at[(backend, s)] for s in range(3)]
        before = [window(c, 2250, 3000) for c in seeds]
        after = [window(c, 3250, 4000) for c in seeds]
        falling = sum(a < b for a, b in zip(after, before, strict=True))
        parts.append((label, statistics.fmean(before), statistics.fmean(after), falling))
        if backend == "softmax":
            assert falling == 2 and after[0] > before[0]
            assert f"seed 0 rose, {before[0]:.3f} → {after[0]:.3f}, on one bad validation" in page
        else:
            assert falling == 3, label
    (_, s_before, s_after, _), *others = parts
    assert f"over seeds: softmax {s_before:.3f} → {s_after:.3f} (falling on 2 of 3 seeds;" in page
    quoted = ", ".join(f"{label} {b:.3f} → {a:.3f}" for label, b, a, _ in others)
    assert f"{quoted} (each falling on 3/3)" in page
    best = [min(curve, key=curve.__getitem__) for curve in at.values()]
    late = sum(step >= 3750 for step in best)
    assert (
        len(best) == 12 and f"{late} of the 12 best validations are at step 3,750 or 4,000" in page
    )
