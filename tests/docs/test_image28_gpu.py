"""image_completion.md's 784-token GPU runs (section 0: equal wall-clock and equal-steps tables
and their readings), recomputed from ``image28_gpu{,_runs,_curves}.csv`` and the committed
histogram baseline of the upsampled digits."""

from __future__ import annotations

import re
import statistics

from lab.results.tables import format_mean_std
from tests.docs.pages import RESULTS, page_table, runs

PAGE = "image_completion.md"
BACKENDS = {
    "softmax": "softmax",
    "linear (elu + 1)": "linear",
    "performer (m = 64)": "performer",
    "polysketch (r = 32)": "polysketch",
}
EQUAL_TIME = "| backend | steps in 4 min (training steps/s) | test bits/dim |"


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _histogram_28() -> float:
    text = (RESULTS / "image_histogram_baselines.md").read_text()
    found = re.search(r"digits 28x28, .*?: ([\d.]+) bits/dim on all 784 pixels", text)
    assert found
    return float(found[1])


def _steps(variant: str) -> list[int]:
    return [int(r["global_step"]) for r in runs("image28_gpu_runs") if r["variant"] == variant]


def _val(variant: str, step: int) -> list[float]:
    return [
        float(r["val/loss"])
        for r in runs("image28_gpu_curves")
        if r["variant"] == variant and int(r["optimizer_steps"]) == step
    ]


def test_equal_wall_clock_table_is_image28_gpu_csvs():
    lines = (RESULTS / PAGE).read_text().splitlines()
    histogram = _histogram_28()
    (header,) = [line for line in lines if line.startswith(EQUAL_TIME)]
    assert header.endswith(f"| vs histogram ({histogram:.3f}) |")
    table = {row[0]: row[1:] for row in page_table(PAGE, EQUAL_TIME)}
    summary = {r["variant"]: r for r in runs("image28_gpu")}
    assert table.keys() == BACKENDS.keys() and summary.keys() == set(BACKENDS.values())
    for label, variant in BACKENDS.items():
        row, steps = summary[variant], _steps(variant)
        assert len(steps) == int(row["runs"]) == 3 and row["crashed"] == "0", label
        rate = statistics.fmean(steps) / float(row["seconds_mean"])
        mean = float(row["test/bits_per_dim_mean"])
        assert [c.replace("**", "") for c in table[label]] == [
            f"{min(steps):,}–{max(steps):,} ({rate:.1f})",
            format_mean_std(mean, float(row["test/bits_per_dim_std"]), digits=3),
            format_mean_std(
                float(row["test/completion_bpd_mean"]),
                float(row["test/completion_bpd_std"]),
                digits=3,
            ),
            f"{mean - histogram:+.2f}".replace("-", "−"),
        ], label


def test_equal_steps_table_is_image28_gpu_curves():
    table = {row[0]: row[1:] for row in page_table(PAGE, "| step | softmax | linear | performer |")}
    assert list(table) == ["500", "1,000", "1,500", "2,000"]
    for step_cell, cells in table.items():
        step = int(step_cell.replace(",", ""))
        expected = []
        for variant in BACKENDS.values():
            val = _val(variant, step)
            cell = "–"
            if len(val) > 1:
                cell = format_mean_std(statistics.fmean(val), statistics.stdev(val), digits=2)
                cell += "" if len(val) == 3 else f" (n = {len(val)})"
            expected.append(cell)
        assert cells == expected, step


def test_gpu_readings_are_the_csvs():
    page = _page()
    # up to 1,500 steps every pairwise difference of the three fast backends is inside the
    # larger of their two seed stds
    fast = ("softmax", "linear", "performer")
    for step in (500, 1000, 1500):
        stats = {
            v: (statistics.fmean(_val(v, step)), statistics.stdev(_val(v, step))) for v in fast
        }
        for a in fast:
            for b in fast:
                assert abs(stats[a][0] - stats[b][0]) < max(stats[a][1], stats[b][1]), (step, a, b)
    at_2000 = {v: statistics.fmean(_val(v, 2000)) for v in fast}
    ahead = at_2000["linear"] - at_2000["softmax"]
    assert f"by 2,000 steps softmax is {ahead:.2f} bits/dim ahead of linear" in page
    assert f"ours at 2,000 steps is +{100 * ahead / at_2000['softmax']:.0f} % relative" in page
    performer = at_2000["softmax"] - at_2000["performer"]
    assert f"is {performer:.2f} ahead of softmax" in page
    assert f"the third seed stopped at {min(_steps('performer')):,} steps" in page
    means = {r["variant"]: float(r["test/bits_per_dim_mean"]) for r in runs("image28_gpu")}
    others = sorted(means[v] for v in ("linear", "performer"))
    assert (
        f"**At equal wall-clock softmax is best** ({means['softmax']:.2f} against "
        f"{others[0]:.2f}–{others[1]:.2f})"
    ) in page
    fewer = statistics.fmean(_steps("softmax")) / statistics.fmean(_steps("polysketch"))
    assert f"ran {fewer:.1f}× fewer steps in the same time" in page
    rates = {
        r["variant"]: statistics.fmean(_steps(r["variant"])) / float(r["seconds_mean"])
        for r in runs("image28_gpu")
    }
    assert f"softmax {rates['softmax']:.1f} steps/s against linear {rates['linear']:.1f}" in page


def test_not_done_steps_are_the_runs_csv():
    steps = [s for v in ("softmax", "linear", "performer") for s in _steps(v)]
    assert (
        f"({min(steps):,}–{max(steps):,} steps of batch 16 for the three faster backends" in _page()
    )
