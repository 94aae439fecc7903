"""polynomial.md's reading of the 10,000-step spike bursts (when they start, the gradient inside
them and before them), recomputed from ``polynomial_len50_10k_traces_{bursts,spikes}.csv``."""

from __future__ import annotations

import statistics

from tests.docs.pages import RESULTS, runs

PAGE = "polynomial.md"
SKETCH = "polysketch_sketch_size-64"


def _page() -> str:
    return " ".join((RESULTS / PAGE).read_text().split())


def _bursts() -> list[dict[str, str]]:
    return runs("polynomial_len50_10k_traces_bursts")


def test_burst_timing_is_the_bursts_csv():
    page, bursts = _page(), _bursts()
    early = [b for b in bursts if int(b["first_step"]) <= 3584]
    late = sorted((b for b in bursts if int(b["first_step"]) > 3584), key=lambda b: int(b["seed"]))
    starts = [int(b["first_step"]) for b in early]
    assert (
        f"{len(early)} of the {len(bursts)} start between steps {min(starts)} and {max(starts):,}"
    ) in page
    assert len(late) == 5 and all(b["variant"] == SKETCH for b in late)
    assert "the other five are PolySketch's" in page
    by_seed = {(b["seed"], b["first_step"]): b for b in late}
    seed3, seed3_late = by_seed[("3", "3597")], by_seed[("3", "4239")]
    seed1, seed1_late = by_seed[("1", "5571")], by_seed[("1", "7286")]
    seed4 = by_seed[("4", "3749")]
    assert (
        f"seed 3 at {int(seed3['first_step']):,}–{int(seed3['last_step']):,} (to "
        f"{float(seed3['max_loss']):.1e}) and {int(seed3_late['first_step']):,}–"
        f"{int(seed3_late['last_step']):,}, seed 4 at {int(seed4['first_step']):,}, "
        f"seed 1 at {int(seed1['first_step']):,}–{int(seed1['last_step']):,} (to "
        f"{float(seed1['max_loss']):.1e}) and {int(seed1_late['first_step']):,} (one spike, to "
        f"{float(seed1_late['max_loss']):.1e})"
    ).replace("e-03", "·10⁻³").replace("e-09", "·10⁻⁹") in page
    lengths = [int(b["last_step"]) - int(b["first_step"]) + 1 for b in bursts]
    assert f"Bursts last {min(lengths)}–{max(lengths):,} steps" in page


def test_gradients_in_and_before_bursts_are_the_csvs():
    page, bursts, spikes = _page(), _bursts(), runs("polynomial_len50_10k_traces_spikes")
    largest = []
    for burst in (b for b in bursts if float(b["max_loss"]) > 1e-3):
        run = (burst["variant"], burst["seed"])
        first, last = int(burst["first_step"]), int(burst["last_step"])
        inside = [float(s["grad_norm"]) for s in spikes
                  if (s["variant"], s["seed"]) == run and s["grad_norm"]
                  and first <= int(s["step"]) <= last]  # fmt: skip
        largest.append(max(inside))
    assert len(largest) == 29
    assert (
        f"the largest pre-clip gradient norm at the 20-step logs is {min(largest):.2f}–"
        f"{max(largest):.1f} (median {statistics.median(largest):.2f};"
    ) in page
    at_spike = max(float(s["grad_at_spike"]) for s in spikes if s["grad_at_spike"])
    assert f"and up to {at_spike:.0f} at a spike's own step" in page
    recent = max(float(s["grad_norm_over_recent"]) for s in spikes if s["grad_norm_over_recent"])
    own = max(
        float(s["grad_at_spike_over_median"]) for s in spikes if s["grad_at_spike_over_median"]
    )
    assert f"up to {recent / 1e6:.1f}·10⁶× the median of the 200 steps before" in page
    assert f"{own / 1e7:.1f}·10⁷× that of the 50 steps before at a spike's own step" in page
    before_log = sorted(float(b["first_grad_norm_over_recent"]) for b in bursts)
    low = [r for r in before_log if r < 3]
    others = [f"{r:.{1 if r < 10 else 0}f}×" for r in before_log[len(low) :]]
    listed = f"{', '.join(others[:-1])} and {others[-1]}"
    assert (
        f"the last log before {len(low)} of the {len(bursts)} bursts is {low[0]:.2f}–"
        f"{low[-1]:.1f}× the median of the 200 steps before (the others {listed})"
    ) in page


def test_the_step_into_a_spike_is_the_bursts_csv():
    page, bursts = _page(), _bursts()
    logged = [b for b in bursts if b["first_grad_before_spike_over_median"]]
    assert len(logged) == 35 and len({(b["variant"], b["seed"]) for b in logged}) == 10
    at = [float(b["first_grad_at_spike_over_median"]) for b in logged]
    assert "(ten runs:" in page and f"; {len(logged)} bursts), the spike step itself" in page
    assert (
        f"({min(at):.1f}–{max(at):,.0f}× the median of the 50 steps before)".replace(
            "384,770", "385,000"
        )
        in page
    )
    before = sorted(float(b["first_grad_before_spike_over_median"]) for b in logged)
    high = [x for x in before if x >= 4.5]
    low = [x for x in before if x < 3]
    assert len(high) + len(low) == len(before)  # "none in between"
    assert (
        f"≥ 4.5× in {len(high)} of the {len(before)} bursts ({high[0]:.1f}–{high[-1]:.0f}×), under "
        f"3× in the other {len(low)} ({low[0]:.2f}–{low[-1]:.1f}×), none in between"
    ) in page
