"""The LoRA study's report: tables from per-run CSVs, and the committed tables regenerated from
the committed per-run CSVs."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from attn_lightning.results.files import read_csv, write_csv
from attn_lightning.studies.lora.report import write_report
from attn_lightning.studies.lora.runs import FIELDS

DOCS = Path(__file__).resolve().parents[3] / "docs" / "results"


def _write_rows(path: Path, rows: list[dict]) -> None:
    write_csv(path, rows, fields=FIELDS)


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
    _write_rows(tmp_path / "lora_mlp_runs.csv", mlp)
    _write_rows(tmp_path / "lora_transformer_runs.csv", transformer)
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


def test_the_committed_tables_regenerate_from_the_committed_runs(tmp_path):
    for path in DOCS.glob("lora_*_runs.csv"):
        shutil.copy(path, tmp_path)
    shutil.copy(DOCS / "lora.md", tmp_path)
    write_report(tmp_path / "lora")
    for name in ("lora_summary.csv", "lora_lrsweep_summary.csv"):
        assert (tmp_path / name).read_bytes() == (DOCS / name).read_bytes(), name
    # The page too, but for the machine that wrote it.
    machine = re.compile(r"^Machine: [^,]*,", flags=re.M)
    ours = (tmp_path / "lora.md").read_text().replace(str(tmp_path), "docs/results")
    ours = machine.sub("Machine: (this one),", ours)
    assert "lora lrsweep --out docs/results/lora --seeds 0 1 2 --source digits" in ours
    # The digits ran the first 3-rate grids, not today's defaults: the command names them.
    assert "--lrs-base 0.001 0.003 0.01 --lrs-full 0.0003 0.001 0.003 --lrs-lora 0.001" in ours
    assert ours == machine.sub("Machine: (this one),", (DOCS / "lora.md").read_text())
    _, rows = read_csv(tmp_path / "lora_lrsweep_summary.csv")
    assert len(rows) == 267 and sum(r["chosen"] == "True" for r in rows) > 0
    # The comparison can fail: one changed run changes the summary.
    runs = (tmp_path / "lora_mlp_runs.csv").read_text()
    assert ",0.9630996584892273," in runs
    (tmp_path / "lora_mlp_runs.csv").write_text(runs.replace(",0.9630996584892273,", ",0.5,"))
    write_report(tmp_path / "lora")
    assert (tmp_path / "lora_summary.csv").read_bytes() != (DOCS / "lora_summary.csv").read_bytes()


def test_the_committed_mnist5k_tables_regenerate_from_their_runs(tmp_path):
    shutil.copy(DOCS / "lora_mnist5k_lrsweep_runs.csv", tmp_path)
    shutil.copy(DOCS / "lora_mnist5k.md", tmp_path)
    write_report(tmp_path / "lora_mnist5k")
    name = "lora_mnist5k_lrsweep_summary.csv"
    assert (tmp_path / name).read_bytes() == (DOCS / name).read_bytes()
    machine = re.compile(r"^Machine: [^,]*,", flags=re.M)
    ours = (tmp_path / "lora_mnist5k.md").read_text().replace(str(tmp_path), "docs/results")
    assert machine.sub("M,", ours) == machine.sub("M,", (DOCS / "lora_mnist5k.md").read_text())
    assert "lrsweep --out docs/results/lora_mnist5k --seeds 0 1 2 --source mnist5k" in ours
    assert "--lrs-" not in ours  # widened to today's default grids (issue 46)
    assert not (tmp_path / "lora_mnist5k_summary.csv").exists()  # no mlp/variants/transformer
