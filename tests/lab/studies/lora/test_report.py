"""The LoRA study's report kind: the page's tables and CSVs from run records (the committed
pages rebuilt from their plans: tests/docs/test_plan_pages.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_lightning.records.files import read_csv
from lab.studies.lora.report import report
from tests.lab.studies.lora.rows import write_rows


def write_report(out: Path, notes: Path | None = None) -> None:
    """The ``lora`` page of the records under ``<out>/runs``."""
    report([out / "runs"], out, command="python -m lab.studies.sweep --plan the.yaml", notes=notes)


def test_report_tables_from_fake_rows(tmp_path):
    ok = {"status": "ok", "exact_acc": "", "seconds": "10"}
    mlp = [
        {**ok, "part": "mlp", "domain": "original", "method": "base", "rank": 0, "seed": s}
        | {"trainable_params": 55050, "acc": a}
        for s, a in ((0, 0.96), (1, 0.98))
    ]
    mlp += [
        {**ok, "part": "mlp", "domain": "rotated", "method": m, "rank": r, "seed": 0}
        | {"trainable_params": p, "acc": a}
        for m, r, p, a in (
            ("before", 0, 55050, 0.2),
            ("full", 0, 55050, 0.9),
            ("lora", 4, 4200, 0.85),
            ("lora_scratch", 4, 4200, 0.5),
        )
    ]
    transformer = [
        {**ok, "part": "transformer", "domain": "reversal+1", "method": "lora", "rank": 4}
        | {"seed": 0, "trainable_params": 2048, "acc": 0.99, "exact_acc": 0.9},
        {"part": "transformer", "domain": "reversal+1", "method": "lora", "rank": 4, "seed": 1}
        | {"status": "crashed", "seconds": "1"},
    ]
    write_rows(tmp_path / "lora", [*mlp, *transformer])
    committed = tmp_path / "committed.md"
    committed.write_text("<!-- notes:begin -->\nkept\n<!-- notes:end -->\n")
    write_report(tmp_path / "lora", notes=committed)
    md = (tmp_path / "lora.md").read_text()
    assert "<!-- notes:begin -->\nkept\n<!-- notes:end -->" in md
    assert "test accuracy 97.0 ± 1.4 % (seeds 0 1)" in md
    assert "Before adaptation: 20.0 ± 0.0 %. Full fine-tune (55,050 trainable): 90.0 ± 0.0 %" in md
    assert "| 4 | 4,200 | 85.0 ± 0.0 | 50.0 ± 0.0 | 10 |" in md
    assert "| reversal+1 | LoRA | 4 | 2,048 | 99.0 ± 0.0 | 90.0 ± 0.0 | 1 (1 crashed) | 10 |" in md
    # A part with no runs gets no table, only its name among those not run; no sweep, no command.
    assert "LoRA variants" not in md and "Against the student" not in md
    assert "Not run into this prefix (no tables below): variants, lrsweep." in md
    assert "`lora_mlp_runs.csv`, `lora_transformer_runs.csv`" in md
    assert "lora_lrsweep_summary.csv" not in md
    assert "```bash\npython -m lab.studies.sweep --plan the.yaml\n```" in md
    _, rows = read_csv(tmp_path / "lora_summary.csv")
    summary = {(r["domain"], r["method"]): r for r in rows}
    assert float(summary[("original", "base")]["acc_mean"]) == pytest.approx(0.97)
    assert summary[("reversal+1", "lora")]["crashed"] == "1"


def test_a_rank_only_the_variants_part_ran_is_no_row_of_an_mlp_table(tmp_path):
    ok = {"status": "ok", "seconds": "10", "seed": 0, "domain": "rotated", "acc": 0.9}
    rows = [{**ok, "part": "mlp", "method": "lora", "rank": 4, "trainable_params": 4200}]
    rows += [{**ok, "part": "variants", "method": "lora_head_frozen", "rank": 8}]
    write_rows(tmp_path / "lora", rows)
    write_report(tmp_path / "lora")
    md = (tmp_path / "lora.md").read_text()
    assert "\n| 4 | 4,200 | 90.0 ± 0.0 | – | 10 |" in md and "\n| 8 |" not in md
    assert "| rotated | LoRA on fc1, fc2; head frozen | 8 |" in md
