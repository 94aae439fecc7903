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
