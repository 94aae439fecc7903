"""The LoRA study's runs: RunResults kept in resumable per-run CSVs, their validation facts."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from attn_lightning.results.files import read_csv
from attn_lightning.results.records import RunResult
from attn_lightning.studies.lora import runs
from attn_lightning.studies.lora.cli import build_parser
from attn_lightning.studies.lora.runs import FIELDS
from attn_lightning.studies.runner import Runner, Variant

DOCS = Path(__file__).resolve().parents[3] / "docs" / "results"


def _args(tmp_path: Path, part: str = "mlp"):
    base = ["--out", str(tmp_path / "lora"), "--work", str(tmp_path / "work"), "--seeds", "0"]
    return build_parser().parse_args([part, *base])


def _fake_run(self: Runner, variant: Variant, seed: int) -> RunResult:
    if "crash" in variant.name:
        return RunResult(variant.name, seed, 1.0, "crashed")
    metrics = {"test/acc": 0.5 + seed / 10, "test/trainable_params": 1050.0}
    return RunResult(variant.name, seed, 2.04, "ok", metrics, 10)


def test_run_part_writes_a_row_per_run_and_skips_done_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(Runner, "run", _fake_run)
    args = _args(tmp_path)
    info = {"part": "mlp", "domain": "rotated", "rank": 1}
    jobs = [
        (Variant("rotated-lora-r1"), 0, {**info, "adaptation": "lora"}),
        (Variant("rotated-crash-r1"), 0, {**info, "adaptation": "crash"}),
    ]
    (tmp_path / "work" / "checkpoints" / "lora-study" / "rotated-lora-r1-s0").mkdir(parents=True)
    runs.run_part(args, "mlp", jobs)
    path = tmp_path / "lora_mlp_runs.csv"
    _, rows = read_csv(path)
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
    assert not path.with_name(path.name + ".partial").exists()
    # Adapted runs' checkpoints are removed unless --keep-checkpoints.
    assert not (tmp_path / "work" / "checkpoints" / "lora-study" / "rotated-lora-r1-s0").exists()
    # A re-run skips the ok row and retries the crashed one.
    runs.run_part(args, "mlp", jobs)
    assert [r["method"] for r in read_csv(path)[1]] == ["lora", "crash", "crash"]
    # Read back, a row is a RunResult with the study's facts in info.
    first = runs.read_runs(path)[0]
    assert (first.seed, first.status, first.seconds) == (0, "ok", 2.0)
    assert first.metrics == {"trainable_params": 1050, "acc": 0.5}
    assert first.info == {"part": "mlp", "domain": "rotated", "adaptation": "lora", "rank": 1}


def test_a_base_whose_checkpoint_is_gone_is_pending_again(tmp_path, monkeypatch):
    monkeypatch.setattr(Runner, "run", _fake_run)
    args = _args(tmp_path)
    keep = tmp_path / "base.ckpt"
    info = {"part": "mlp", "domain": "original", "adaptation": "base", "rank": 0}
    jobs = [(Variant("base-mlp"), 0, {**info, "_keep": str(keep)})]
    keep.touch()
    runs.run_part(args, "mlp", jobs)
    assert runs.pending(args, "mlp", jobs) == []
    assert "_keep" not in runs.read_runs(tmp_path / "lora_mlp_runs.csv")[0].info
    keep.unlink()
    assert runs.pending(args, "mlp", jobs) == jobs


@pytest.mark.parametrize("part", ["mlp", "variants", "transformer", "lrsweep"])
def test_committed_run_csvs_read_back_and_write_byte_for_byte(part, tmp_path):
    committed = DOCS / f"lora_{part}_runs.csv"
    read = runs.read_runs(committed)
    assert read and all(r.info["part"] == part for r in read)
    runs.write_runs(tmp_path / "again.csv", read, part)
    assert (tmp_path / "again.csv").read_bytes() == committed.read_bytes()


def test_best_validation_reads_the_lowest_val_loss_epoch(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step, (loss, acc) in enumerate(((1.0, 0.6), (0.5, 0.8), (0.5, 0.85), (0.7, 0.9)), 1):
        writer.add_scalar("val/loss", loss, 20 * step)
        writer.add_scalar("val/acc", acc, 20 * step)
    writer.close()
    best = runs.best_validation(tmp_path)
    # The first minimum: ModelCheckpoint keeps a checkpoint only on a strictly lower val/loss.
    assert best == {"val_loss": 0.5, "val_acc": pytest.approx(0.8), "best_epoch": 2}
    assert runs.best_validation(tmp_path / "none") == {}
    assert runs.best_validation(tmp_path, monitor="val/other") == {}


def test_fit_details_take_epochs_from_the_metrics_file_and_the_rest_from_tensorboard(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path / "logs"))
    for epoch, loss in enumerate((0.9, 0.4, 0.6)):
        writer.add_scalar("val/loss", loss, epoch)
    writer.close()
    runner = Runner(runs_dir=tmp_path / "metrics")
    variant = Variant("lrs-rotated-full-lr0.001")
    runner.metrics_file(variant, 0).parent.mkdir()
    runner.metrics_file(variant, 0).write_text('{"epoch": 7}')
    ok = RunResult(variant.name, 0, 1.0, "ok", {"test/acc": 0.9}, log_dir=str(tmp_path / "logs"))
    details = runs.fit_details(runner, variant, ok)
    assert details == {"epochs": 7, "val_loss": pytest.approx(0.4), "best_epoch": 2}
    info = {"part": "lrsweep", "adaptation": "full", "lr": "0.001"}
    run = runs.study_run(ok, {**info, "_keep": "x"}, details)
    assert run.info == {**info, "epochs": 7, "best_epoch": 2}
    assert run.metrics == {"acc": 0.9, "val_loss": pytest.approx(0.4)}
    assert runs.fit_details(runner, variant, replace(ok, status="crashed")) == {}
    test_only = replace(ok, log_dir=None)  # a test run's metrics file names no epoch
    runner.metrics_file(variant, 0).write_text('{"test": {}}')
    assert runs.fit_details(runner, variant, test_only) == {"epochs": None}
    assert runs.study_run(test_only, info, {"epochs": None}).info == info
