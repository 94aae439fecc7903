"""The LoRA study's report: tables from run records, and the committed pages and CSVs
regenerated from the committed records."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attn_lightning.records.files import read_csv
from attn_lightning.records.run_files import load_record, write_record
from lab.studies.lora.report import write_report
from tests.lab.studies.lora.rows import write_rows

DOCS = Path(__file__).resolve().parents[3] / "docs" / "results"


def _copy_study(name: str, tmp_path: Path) -> Path:
    """The committed records and page of ``docs/results/<name>`` copied into ``tmp_path``."""
    shutil.copytree(DOCS / name, tmp_path / name)
    shutil.copy(DOCS / f"{name}.md", tmp_path)
    return tmp_path / name


def _page(path: Path, tmp_path: Path) -> str:
    return path.read_text().replace(str(tmp_path), "docs/results")


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
    (tmp_path / "lora.md").write_text("<!-- notes:begin -->\nkept\n<!-- notes:end -->\n")
    write_report(tmp_path / "lora")
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
    assert "lora lrsweep --out" not in md and "lora_lrsweep_summary.csv" not in md
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


def test_the_committed_tables_regenerate_from_the_committed_records(tmp_path, elsewhere):
    out = _copy_study("lora", tmp_path)
    write_report(out)
    for part in ("mlp", "variants", "transformer", "lrsweep"):
        name = f"lora_{part}_runs.csv"
        assert (tmp_path / name).read_bytes() == (DOCS / name).read_bytes(), name
    for name in ("lora_summary.csv", "lora_lrsweep_summary.csv"):
        assert (tmp_path / name).read_bytes() == (DOCS / name).read_bytes(), name
    # The page too, machine line and all: rebuilt as by another machine, it names the runs' own.
    ours = _page(tmp_path / "lora.md", tmp_path)
    assert "lora lrsweep --out docs/results/lora --seeds 0 1 2 --source digits" in ours
    # The digits ran the first 3-rate grids, not today's defaults: the command names them.
    assert "--lrs-base 0.001 0.003 0.01 --lrs-full 0.0003 0.001 0.003 --lrs-lora 0.001" in ours
    assert ours == _page(DOCS / "lora.md", tmp_path)
    _, rows = read_csv(tmp_path / "lora_lrsweep_summary.csv")
    assert len(rows) == 267 and sum(r["chosen"] == "True" for r in rows) > 0
    # The comparison can fail: one changed record changes the summary.
    folder = out / "runs" / "mlp" / "base-mlp-s0"
    record = load_record(folder)
    assert record["metrics"]["fit"]["acc"] == 0.9630996584892273
    record["metrics"]["fit"]["acc"] = 0.5
    write_record(folder, record)
    write_report(out)
    assert (tmp_path / "lora_summary.csv").read_bytes() != (DOCS / "lora_summary.csv").read_bytes()


def test_the_committed_mnist5k_tables_regenerate_from_their_records(tmp_path, elsewhere):
    write_report(_copy_study("lora_mnist5k", tmp_path))
    for name in ("lora_mnist5k_lrsweep_summary.csv", "lora_mnist5k_lrsweep_runs.csv"):
        assert (tmp_path / name).read_bytes() == (DOCS / name).read_bytes(), name
    ours = _page(tmp_path / "lora_mnist5k.md", tmp_path)
    assert ours == _page(DOCS / "lora_mnist5k.md", tmp_path)
    assert "lrsweep --out docs/results/lora_mnist5k --seeds 0 1 2 --source mnist5k" in ours
    assert "--lrs-" not in ours  # widened to today's default grids (issue 46)
    assert not (tmp_path / "lora_mnist5k_summary.csv").exists()  # no mlp/variants/transformer
