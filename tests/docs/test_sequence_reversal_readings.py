"""sequence_reversal.md's readings in sentences, recomputed from the committed per-run CSVs:
length 50 at 600 steps, length 256 at 1,000 steps, the ladder's ranges and the 5-seed
3,000-step runs (with their paired CSV)."""

from __future__ import annotations

import statistics

from tests.docs.pages import RESULTS, runs, values

PAGE = "sequence_reversal.md"
PERFORMER = "performer:num_features=64"
SKETCH_16 = "polysketch:sketch=random,norm=fixed,sketch_size=16"
TOKEN, EXACT = "test/token_acc", "test/exact_acc"


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _pct(rows: list[dict[str, str]], backend: str, key: str) -> list[float]:
    return [100 * v for v in values(rows, backend, key)]


def test_length_50_readings_are_the_runs_csv():
    page, rows = _page(), runs("sequence_reversal_len50_runs")
    exact = _pct(rows, SKETCH_16, EXACT)
    assert (
        "the sketch's exact-sequence accuracy is spread over {:.1f}, {:.1f} and {:.1f} % on its "
        "three seeds"
    ).format(*sorted(exact)) in page
    spread = max(exact) - min(exact)
    low, high = min(exact), max(exact)
    assert (
        f"the {spread:.0f}-point spread in exact-sequence accuracy ({low:.1f}–{high:.1f} %)" in page
    )
    linear, performer = (statistics.fmean(_pct(rows, b, TOKEN)) for b in ("linear", PERFORMER))
    assert f"at 600 steps they are at {linear:.0f} % and {performer:.0f} % token accuracy" in page
    assert max(_pct(rows, "linear", EXACT) + _pct(rows, PERFORMER, EXACT)) == 0
    token = _pct(rows, SKETCH_16, TOKEN)
    converged = sorted(t for t in token if t >= 99)
    (missed,) = [t for t in token if t < 99]
    assert (
        f"on two seeds ({converged[0]:.1f} %, {converged[1]:.2f} %) and not converged on the third "
        f"({missed:.1f} %)"
    ) in page


def test_length_256_readings_are_the_runs_csvs():
    page = _page()
    rows = runs("sequence_reversal_len256_a_runs") + runs("sequence_reversal_len256_b_runs")
    fast = ("linear", PERFORMER, SKETCH_16)
    token = [t for b in fast for t in _pct(rows, b, TOKEN)]
    loss = [v for b in fast for v in values(rows, b, "test/loss")]
    assert max(v for b in fast for v in _pct(rows, b, EXACT)) == 0
    assert (
        f"at {min(token):.0f}–{max(token):.0f} % token accuracy on every seed with the test loss "
        f"at {min(loss):.2f}–{max(loss):.2f} (log 10 = 2.30)"
    ) in page
    exact_poly = _pct(rows, "polynomial:norm=fixed", TOKEN)
    assert min(exact_poly) > 98 and sum(t > 99 for t in exact_poly) == 2
    assert "all three seeds pass 98 % token accuracy (two pass 99 %)" in page


def test_ladder_readings_are_the_runs_csvs():
    page = _page()
    ranges = []
    for n in (100, 150):
        rows = runs(f"sequence_reversal_ladder_len{n}_runs")
        token = [t for b in ("linear", PERFORMER) for t in _pct(rows, b, TOKEN)]
        assert max(token) < 99, n
        ranges.append((min(token), max(token)))
    assert f"0/2 at 100 ({ranges[0][0]:.1f}–{ranges[0][1]:.1f} %)" in page
    assert f"0/2 at 150 ({ranges[1][0]:.0f}–{ranges[1][1]:.0f} %)" in page
    exact = _pct(runs("sequence_reversal_ladder_len100_runs"), PERFORMER, EXACT)
    assert f"Performer {exact[0]:.0f} % / {exact[1]:.1f} % at 100 (seeds 0 / 1)" in page
    short = runs("sequence_reversal_len256_a_runs") + runs("sequence_reversal_len256_b_runs")
    long = runs("sequence_reversal_len256_3000steps_5seeds_runs")
    (before_lin, after_lin), (before_perf, after_perf) = (
        (statistics.median(_pct(short, b, TOKEN)), statistics.median(_pct(long, b, TOKEN)))
        for b in ("linear", PERFORMER)
    )
    assert (
        f"lifted linear from ≈ {before_lin:.0f} % to {after_lin:.0f} % and Performer from "
        f"{before_perf:.0f} % to {after_perf:.0f} %"
    ) in page


def test_five_seed_3000_step_readings_are_the_csvs():
    page, rows = _page(), runs("sequence_reversal_len256_3000steps_5seeds_runs")
    linear, performer = (_pct(rows, b, TOKEN) for b in ("linear", PERFORMER))
    assert f"(every seed {min(linear):.1f}–{max(linear):.1f} %)" in page
    assert f"({min(performer):.1f}–{max(performer):.1f} %)" in page
    paired = {r["variant"]: r for r in runs("sequence_reversal_len256_3000steps_outcomes_paired")}
    cells = [
        "{:.2f} pp [{:.2f}, {:.2f}]".format(
            *(float(paired[v][f"Δ token acc (pp) {k}"]) for k in ("mean", "low", "high"))
        ).replace("-", "−")
        for v in ("linear", "performer_num_features-64")
    ]
    assert f"{cells[0]} and {cells[1]} token accuracy" in page
    assert all(
        paired[v]["Δ token acc (pp) < 0"] == "5" for v in ("linear", "performer_num_features-64")
    )
    greedy = [statistics.median(_pct(rows, b, "test/gen_token_acc")) for b in ("linear", PERFORMER)]
    assert f"({greedy[0]:.1f} % and {greedy[1]:.1f} %)" in page
    earlier = {
        r["backend"]: 100 * float(r[TOKEN])
        for r in runs("sequence_reversal_len256_3000steps_linear_runs")
    }
    quoted = f"({earlier['linear']:.2f} % linear, {earlier[PERFORMER]:.2f} % Performer;"
    assert quoted in page and f"these ({linear[0]:.2f} %, {performer[0]:.2f} %)" in page
    sketch = _pct(rows, "polysketch:sketch_size=64", EXACT)
    assert f"95.31] % ({min(sketch):.1f}–{max(sketch):.1f} %)" in page
    seconds = {
        b: statistics.median(values(rows, b, "seconds"))
        for b in ("linear", "polysketch:sketch_size=64")
    }
    assert f"s against {seconds['linear']:.0f} s)" in page
    assert 2 <= seconds["polysketch:sketch_size=64"] / seconds["linear"] <= 3
