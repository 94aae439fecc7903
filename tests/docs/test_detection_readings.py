"""Sentences of detection.md that quote a committed CSV away from any table: each number is
recomputed from its file."""

from __future__ import annotations

import statistics

from tests.docs.pages import RESULTS, runs

PAGE = "detection.md"


def test_reversal_encoder_spike_counts_are_the_report_csv():
    page = " ".join((RESULTS / PAGE).read_text().split())
    spikes: dict[str, list[int]] = {}
    for row in runs("optimization_reversal_report_runs"):
        spikes.setdefault(row["variant"], []).append(int(row["spikes"]))
    assert all(len(counts) == 5 for counts in spikes.values())
    method, control = (statistics.median(spikes[v]) for v in ("optimization", "softmax_no_qk"))
    assert max(spikes["softmax_encoder"]) == 0
    assert (
        f"(a median of {method:.0f} per run for the method and {control:.0f} for its control "
        "`softmax_no_qk`, none for `softmax_encoder`) are counts only"
    ) in page


def test_cross_attention_failure_sentence_is_the_main_study_csvs():
    page = " ".join((RESULTS / PAGE).read_text().split())
    summary = {r["variant"]: r for r in runs("detection_runs")}
    method, control = (
        summary[v] for v in ("optimization_decoder_cross", "softmax_no_qk_decoder_cross")
    )
    cells = [
        f"{float(row['test/mAP_mean']):.3f} ± {float(row['test/mAP_std']):.3f}"
        for row in (method, control)
    ]
    assert (
        f"fails in the paper's form** on 5/5 seeds ({cells[0]} against its control's {cells[1]})"
        in page
    )
    seed0 = {
        v: [float(r["val/mAP"]) for r in runs("detection_runs_curves")
            if r["variant"] == v and r["seed"] == "0"]
        for v in ("optimization_decoder_cross", "softmax_no_qk_decoder_cross")
    }  # fmt: skip
    ours, theirs = seed0.values()
    assert len(ours) == 12
    assert (
        f"its validation mAP stays between {min(ours):.3f} and {max(ours):.3f} at every validation "
        f"to step 6,000, where its control's reaches {max(theirs):.3f}"
    ) in page
