"""warm_start.md's "Against the review, in one place" table: every number in its verdict cells
recomputed from ``warm_start_{digits,reversal}{_runs,_paired,}.csv``."""

from __future__ import annotations

import statistics

from tests.docs.pages import page_table, runs

PAGE = "warm_start.md"
PERFORMERS = ("performer_m64", "performer_m256")


def _table() -> list[list[str]]:
    return page_table(PAGE, "| the review's words | what we tested |")


def _accs(
    task: str, condition: str, key: str, backends: tuple[str, ...] = PERFORMERS
) -> list[float]:
    return [
        100 * float(r[key])
        for r in runs(f"warm_start_{task}_runs")
        if r["condition"] == condition and r["backend"] in backends and r["status"] == "ok"
    ]


def _paired(task: str, backend: str, comparison: str, key: str) -> tuple[float, str]:
    """(mean Δ in pp, the sign counts ``3+ 0− 0=``) of a ``_paired.csv`` cell."""
    (row,) = [r for r in runs(f"warm_start_{task}_paired")
              if r["backend"] == backend and r["comparison"] == comparison]  # fmt: skip
    cell = row[key]
    return float(cell.split()[0]), cell.rsplit("n=3: ", 1)[1].split(", sign p")[0]


def test_zero_shot_and_fine_tune_rows_are_the_runs_csvs():
    zero, tuned, *_ = _table()
    digits = _accs("digits", "zero-shot", "test/acc")
    base = statistics.fmean(_accs("digits", "base", "test/acc", ("softmax",)))
    below = [_paired("digits", b, "zero-shot − fine-tune", "test/acc")[1] for b in PERFORMERS]
    assert below == ["0+ 3− 0="] * 2
    assert zero[2] == (
        f"context, not the claim: {min(digits):.0f}–{max(digits):.0f} %, base {base:.1f} %; "
        "below the fine-tune on 3/3 seeds"
    )
    medians = [
        statistics.median(_accs("reversal", "zero-shot", "test/token_acc", (b,)))
        for b in PERFORMERS
    ]
    converged = sum(a >= 99 for a in _accs("reversal", "zero-shot", "test/token_acc"))
    assert converged == 0
    low, high = min(medians), max(medians)
    assert zero[3] == f"context, not the claim: 0/3 converged, median {low:.0f}–{high:.0f} % token"
    fine = {statistics.fmean(_accs("digits", "fine-tune", "test/acc", (b,))) for b in PERFORMERS}
    assert {f"{f:.1f}" for f in fine} == {"95.2"}
    assert tuned[2] == f"consistent, 3/3 seeds: 95.2 % after 200 steps (base {base:.1f} %)"
    assert min(_accs("reversal", "fine-tune", "test/token_acc")) >= 99
    assert tuned[3] == "consistent, 3/3 seeds converged after 200 steps"


def test_scratch_and_redraw_rows_are_the_paired_csvs():
    _, _, scratch, redraw = _table()
    same = [_paired("digits", b, "fine-tune − scratch", "test/acc") for b in PERFORMERS]
    assert all(signs.startswith("3+") for _, signs in same)
    assert scratch[2].startswith(
        f"equal new-backend steps: ahead on 3/3 seeds (+{same[0][0]:.0f} to +{same[1][0]:.0f} pp,"
    )
    total = [_paired("digits", b, "fine-tune − scratch, base + fine-tune steps", "test/acc")
             for b in PERFORMERS]  # fmt: skip
    assert all(abs(mean) < 1 for mean, _ in total) and scratch[2].endswith(
        "equal total steps: level"
    )
    ahead = sorted(
        _paired("reversal", b, "fine-tune − scratch", "test/token_acc")[0] for b in PERFORMERS
    )
    m64, m256 = (
        _paired("reversal", b, "fine-tune − scratch, base + fine-tune steps", "test/token_acc")
        for b in PERFORMERS
    )
    assert m64[1].startswith("3+") and abs(m256[0]) < 0.1
    assert scratch[3] == (
        f"equal new-backend steps: ahead on 3/3 (+{ahead[0]:.0f} to +{ahead[1]:.0f} pp); equal "
        "total steps: m = 64 ahead on 3/3, m = 256 level"
    )
    digits = [
        _paired("digits", b, "fine-tune + redraw − fine-tune", "test/acc")[0] for b in PERFORMERS
    ]
    assert {f"±{abs(d):.2f}" for d in digits} == {"±0.25"}
    assert redraw[2] == "another regime: no measurable effect (±0.25 pp, intervals span 0)"
    exact = [
        _paired("reversal", b, "fine-tune + redraw − fine-tune", "test/exact_acc")
        for b in PERFORMERS
    ]
    assert exact[0][1] == "0+ 3− 0="
    m64, m256 = (f"{d:.{k}f}".replace("-", "−") for d, k in ((exact[0][0], 0), (exact[1][0], 1)))
    assert redraw[3] == (
        f"another regime: m = 64 {m64} pp exact-sequence on 3/3 seeds, m = 256 {m256} pp"
    )
