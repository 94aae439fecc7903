"""The LoRA study: its runs as runner variants, resumable run CSVs, and the report tables."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from attn_lightning.results.records import RunResult
from attn_lightning.studies import lora, lora_runs
from attn_lightning.studies.lora_report import write_report
from attn_lightning.studies.lora_runs import FIELDS
from attn_lightning.studies.runner import Runner, Variant


def _args(tmp_path: Path, *extra: str):
    base = ["--out", str(tmp_path / "lora"), "--work", str(tmp_path / "work"), "--seeds", "0"]
    return lora.build_parser().parse_args([*base, *extra])


def test_mlp_jobs_adapt_the_seed_base_checkpoint(tmp_path):
    args = _args(tmp_path, "--part", "mlp", "--ranks", "1", "4", "--domains", "rotated")
    jobs = lora.mlp_jobs(args)
    assert [v.name for v, _, _ in jobs] == [
        "base-mlp",
        "rotated-before",
        "rotated-full",
        "rotated-lora-r1",
        "rotated-lora-r4",
        "rotated-lora_scratch-r1",
        "rotated-lora_scratch-r4",
    ]
    by_name = {v.name: (v, row) for v, _, row in jobs}
    before, row = by_name["rotated-before"]
    assert before.subcommand == "test" and row == {
        "part": "mlp",
        "domain": "rotated",
        "rank": 0,
        "method": "before",
    }
    lora_r4, row = by_name["rotated-lora-r4"]
    ckpt = tmp_path / "work" / "checkpoints" / "lora-study" / "base-mlp-s0" / "last.ckpt"
    assert f"model.init_args.base_checkpoint={ckpt}" in lora_r4.overrides
    assert {"model.init_args.adaptation=lora", "model.init_args.lora_r=4"} <= set(lora_r4.overrides)
    assert not any("mode=" in o for v, _, _ in jobs for o in v.overrides)
    assert row["rank"] == 4 and row["method"] == "lora"


def test_transformer_jobs_share_one_base(tmp_path):
    args = _args(tmp_path, "--part", "transformer", "--seeds", "0", "1", "--transformer-ranks", "2")
    jobs = lora.transformer_jobs(args)
    assert [(v.name, seed) for v, seed, _ in jobs][:5] == [
        ("base-reversal", 0),
        ("rev-before", 0),
        ("rev-full", 0),
        ("rev-lora-r2", 0),
        ("rev-lora_scratch-r2", 0),
    ]
    assert sum(v.name == "base-reversal" for v, _, _ in jobs) == 1
    full = next(v for v, _, _ in jobs if v.name == "rev-full")
    assert "model.init_args.adaptation=full" in full.overrides


def _fake_run(self: Runner, variant: Variant, seed: int) -> RunResult:
    if "crash" in variant.name:
        return RunResult(variant.name, seed, 1.0, "crashed")
    metrics = {"test/acc": 0.5 + seed / 10, "test/trainable_params": 1050.0}
    return RunResult(variant.name, seed, 2.04, "ok", metrics, 10)


def test_run_part_appends_rows_and_skips_done_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(Runner, "run", _fake_run)
    args = _args(tmp_path, "--part", "mlp")
    row = {"part": "mlp", "domain": "rotated", "rank": 1}
    jobs = [
        (Variant("rotated-lora-r1"), 0, {**row, "method": "lora"}),
        (Variant("rotated-crash-r1"), 0, {**row, "method": "crash"}),
    ]
    (tmp_path / "work" / "checkpoints" / "lora-study" / "rotated-lora-r1-s0").mkdir(parents=True)
    lora_runs.run_part(args, "mlp", jobs)
    path = tmp_path / "lora_mlp_runs.csv"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == FIELDS
    assert rows[0] == {
        "part": "mlp",
        "domain": "rotated",
        "method": "lora",
        "rank": "1",
        "seed": "0",
        "status": "ok",
        "trainable_params": "1050",
        "acc": "0.5",
        "exact_acc": "",
        "seconds": "2.0",
    }
    assert rows[1]["status"] == "crashed" and rows[1]["acc"] == ""
    # Adapted runs' checkpoints are removed unless --keep-checkpoints.
    assert not (tmp_path / "work" / "checkpoints" / "lora-study" / "rotated-lora-r1-s0").exists()
    # A re-run skips the ok row and retries the crashed one.
    lora_runs.run_part(args, "mlp", jobs)
    with path.open() as f:
        assert [r["method"] for r in csv.DictReader(f)] == ["lora", "crash", "crash"]


def _write_rows(path: Path, rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


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
    assert "### LoRA variants: the head and the biases\n\n(not run yet)" in md
    with (tmp_path / "lora_summary.csv").open() as f:
        summary = {(r["domain"], r["method"]): r for r in csv.DictReader(f)}
    assert float(summary[("original", "base")]["acc_mean"]) == pytest.approx(0.97)
    assert summary[("reversal+1", "lora")]["crashed"] == "1"
