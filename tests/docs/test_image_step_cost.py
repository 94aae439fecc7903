"""image_completion.md's CPU cost per training step: the fit times the page quotes are those of
``image28_mnist5k_runs.csv`` (the planning timings behind the budget have no file: not shown)."""

from __future__ import annotations

import csv
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
PAGE = RESULTS / "image_completion.md"


def test_step_cost_sentence_is_the_runs_csv() -> None:
    with (RESULTS / "image28_mnist5k_runs.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {int(r["global_step"]) for r in rows} == {4000}
    parts = []
    for backend in ("softmax", "linear", "performer", "polysketch"):
        per_1000 = [float(r["seconds"]) / 4 for r in rows if r["variant"] == backend]
        assert len(per_1000) == 3, backend
        parts.append(f"{backend}\n{min(per_1000):.0f}–{max(per_1000):.0f} s")
    text = " ".join(PAGE.read_text().split())  # the sentence wraps
    for part in parts:
        assert " ".join(part.split()) in text, part
    hours = sum(float(r["seconds"]) for r in rows) / 3600
    assert f"the 12 runs took {hours:.2f} core-hours" in " ".join(text.split())
    assert "| `size28.yaml`: 4 layers × 128" not in text  # the unbacked table stays out
