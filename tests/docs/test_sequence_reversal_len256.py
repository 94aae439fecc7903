"""sequence_reversal.md's length-256 softmax reading ("learns it suddenly or not yet"), recomputed
from the committed CSVs: the sweep's per-run test accuracies, the 3,000-step follow-up, and the
validation curves of the same configuration's later rerun (the sweep itself kept none)."""

from __future__ import annotations

from tests.docs.pages import RESULTS, runs, values

PAGE = "sequence_reversal.md"


def test_softmax_len256_reading_is_the_csvs():
    page = " ".join((RESULTS / PAGE).read_text().split())
    ends = [
        100 * a
        for a in values(runs("sequence_reversal_len256_b_runs"), "softmax", "test/token_acc")
    ]
    (longer,) = values(
        runs("sequence_reversal_len256_3000steps_softmax_runs"), "softmax", "test/token_acc"
    )
    assert (
        f"seeds 0 and 2 end at {ends[0]:.2f} and {ends[2]:.2f} % test token accuracy, seed 1 at "
        f"{ends[1]:.2f} % after 1,000 steps"
    ) in page
    assert longer == 1.0 and "with the schedule stretched to 3,000 steps it ends at 100 %" in page
    at = {
        (int(r["seed"]), int(r["optimizer_steps"])): 100 * float(r["val/token_acc"])
        for r in runs("polynomial_len256_curves")
        if r["variant"] == "softmax"
    }
    step500 = [v for (_, step), v in at.items() if step == 500]
    jumped = [at[(s, 750)] for s in (0, 2, 3, 4)]
    assert len(step500) == 5 and min(jumped) > 90 > at[(1, 750)]
    assert (
        f"validation token accuracy {min(step500):.1f}–{max(step500):.1f} % at step 500 on every "
        f"seed, then {min(jumped):.1f}–{max(jumped):.1f} % at step 750 on four of them, while "
        f"seed 1 is still at {at[(1, 750)]:.1f} % at step 750 and {at[(1, 1000)]:.1f} % at 1,000"
    ) in page
