"""detection.md's section 2b ingredient table (2,000 steps, seeds 0-1), recomputed from
``detection_ablation``'s committed CSVs, with the numbers around it (full softmax at the same
budget, the drop-in form, the ladder's ranges)."""

from __future__ import annotations

from lab.results.tables import format_mean_std
from tests.docs.pages import RESULTS, page_table, runs

PAGE = "detection.md"


def _seeds(rows: list[dict[str, str]], variant: str) -> list[float]:
    """``variant``'s finished test mAP, seed order."""
    chosen = sorted((r for r in rows if r["variant"] == variant and r["status"] == "ok"),
                    key=lambda r: int(r["seed"]))  # fmt: skip
    return [float(r["test/mAP"]) for r in chosen]


def test_ingredient_table_is_detection_ablation_csvs():
    table = page_table(PAGE, "| ingredient changed (paper's value → this row) |")
    summary, per_run = runs("detection_ablation"), runs("detection_ablation_runs")
    # the page's rows are the CSV's, in its order: the paper's form, 7 ingredients, the control
    assert len(table) == len(summary) == 9
    assert summary[-1]["variant"] == "softmax_no_qk_decoder_cross"
    for cells, row in zip(table, summary, strict=True):
        mean, std = float(row["test/mAP_mean"]), float(row["test/mAP_std"])
        delta = row["Δ test mAP vs default [95 % CI]"].removesuffix(" (n=2)")
        expected = [
            " / ".join(f"{v:.3f}" for v in _seeds(per_run, row["variant"])),
            format_mean_std(mean, std, digits=3),
            "–" if delta in ("reference", "") else delta.replace("-", "−"),
            row["keys90"].split(" ± ")[0] or "–",
        ]
        assert cells[1:] == expected, row["variant"]


def test_ingredient_table_surroundings_are_their_csvs():
    page = " ".join((RESULTS / PAGE).read_text().split())
    (softmax,) = runs("detection_ablation_softmax")
    seeds = _seeds(runs("detection_ablation_softmax_runs"), "softmax")
    full = format_mean_std(
        float(softmax["test/mAP_mean"]), float(softmax["test/mAP_std"]), digits=3
    )
    assert f"full softmax at {full} ({seeds[0]:.3f}, {seeds[1]:.3f};" in page
    assert f"its control is full softmax, {seeds[0]:.3f} / {seeds[1]:.3f} at this budget" in page
    drop_in = _seeds(runs("detection_cross_keys_qk_runs"), "optimization_decoder_cross")
    assert f"at this budget): {drop_in[0]:.3f} / {drop_in[1]:.3f} (`detection_cross_keys_qk" in page
    per_run = runs("detection_ablation_runs")
    ladder = [float(r["test/mAP"]) for r in per_run if r["variant"].startswith("optimization")]
    assert len(ladder) == 16 and len(drop_in) == 2
    best = max(ladder + drop_in)
    assert best <= 0.063 and "(test mAP ≤ 0.063;" in page
    curves = [r for name in ("detection_ablation_curves", "detection_cross_keys_qk_curves")
              for r in runs(name) if r["variant"].startswith("optimization")]  # fmt: skip
    assert max(float(r["val/mAP"]) for r in curves) <= 0.06
    control = _seeds(per_run, "softmax_no_qk_decoder_cross")
    assert f"against 2/2 control runs at {min(control):.2f}–{max(control):.2f}" in page
