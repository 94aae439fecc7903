"""The LoRA study's runs: finished runs published as run records, resumed from them, their
validation facts from the run's curves."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_lightning.records.files import read_csv
from attn_lightning.records.run_files import load_record, write_curves, write_record
from lab.results.records import RunResult, load_runs, run_scalars
from lab.studies.lora import runs
from lab.studies.lora.cli import build_parser
from lab.studies.runner import Runner, Variant, run_name

DOCS = Path(__file__).resolve().parents[3] / "docs" / "results"


def _args(tmp_path: Path, part: str = "mlp"):
    base = ["--out", str(tmp_path / "lora"), "--work", str(tmp_path / "work"), "--seeds", "0"]
    return build_parser().parse_args([part, *base])


def _fake_run(self: Runner, variant: Variant, seed: int) -> RunResult:
    """A run that writes its record as train.py would (an early stop: status ``stopped``)."""
    if "crash" in variant.name:
        return RunResult(variant.name, seed, 1.0, "crashed")
    folder = self.run_dir(variant, seed)
    folder.mkdir(parents=True, exist_ok=True)
    metrics = {"test/acc": 0.5 + seed / 10, "test/trainable_params": 1050.0}
    record = {
        "schema": 1,
        "run": folder.name,
        "seed": seed,
        "tags": self.run_tags(variant, seed),
        "status": "stopped",
        "fit_seconds": None,
        "metrics": {"fit": {"val/loss": 0.3}, "test": metrics},
    }
    write_record(folder, record)
    return RunResult(variant.name, seed, 2.04, "ok", dict(metrics), 10, log_dir=str(folder))


def test_run_part_publishes_each_finished_run_and_skips_it_after(tmp_path, monkeypatch):
    monkeypatch.setattr(Runner, "run", _fake_run)
    args = _args(tmp_path)
    info = {"part": "mlp", "domain": "rotated", "rank": 1}
    jobs = [
        (Variant("rotated-lora-r1"), 0, {**info, "adaptation": "lora"}),
        (Variant("rotated-crash-r1"), 0, {**info, "adaptation": "crash"}),
    ]
    (tmp_path / "work" / "checkpoints" / "lora-study" / "rotated-lora-r1-s0").mkdir(parents=True)
    runs.run_part(args, "mlp", jobs)
    published = runs.part_dir(args.out, "mlp") / "rotated-lora-r1-s0"
    assert published == tmp_path / "lora" / "runs" / "mlp" / "rotated-lora-r1-s0"
    record = load_record(published)
    # The study's metrics beside the run's own; its outcome ok (an early stop is a finish).
    assert record["status"] == "ok" and record["fit_seconds"] == 2.0
    assert record["metrics"]["fit"] == {"val/loss": 0.3, "acc": 0.5, "trainable_params": 1050}
    (run,) = load_runs(tmp_path / "lora")  # the crashed run is not published
    assert (run.variant, run.seed, run.status, run.seconds) == ("rotated-lora-r1", 0, "ok", 2.0)
    assert run.info == {"part": "mlp", "domain": "rotated", "adaptation": "lora", "rank": 1}
    # Adapted runs' checkpoints are removed unless --keep-checkpoints.
    assert not (tmp_path / "work" / "checkpoints" / "lora-study" / "rotated-lora-r1-s0").exists()
    # A re-run skips the published run and retries the crashed one.
    assert [v.name for v, _, _ in runs.pending(args, "mlp", jobs)] == ["rotated-crash-r1"]


def test_a_base_whose_checkpoint_is_gone_is_pending_again(tmp_path, monkeypatch):
    monkeypatch.setattr(Runner, "run", _fake_run)
    args = _args(tmp_path)
    keep = tmp_path / "base.ckpt"
    info = {"part": "mlp", "domain": "original", "adaptation": "base", "rank": 0}
    jobs = [(Variant("base-mlp"), 0, {**info, "_keep": str(keep)})]
    keep.touch()
    runs.run_part(args, "mlp", jobs)
    assert runs.pending(args, "mlp", jobs) == []
    assert "_keep" not in runs.load_part(args.out, "mlp")[0].info
    keep.unlink()
    assert runs.pending(args, "mlp", jobs) == jobs


@pytest.mark.parametrize("part", ["mlp", "variants", "transformer", "lrsweep"])
def test_committed_records_are_the_committed_csvs_rows(part, tmp_path):
    read = runs.load_part(DOCS / "lora", part)
    assert read and all(r.info["part"] == part and r.status == "ok" for r in read)
    runs.write_runs(tmp_path / "lora", part, read)
    again = tmp_path / f"lora_{part}_runs.csv"
    assert again.read_bytes() == (DOCS / again.name).read_bytes()
    # Every committed record is a job of today's plan: a resumed part finds it by name.
    names = {r.variant for r in read}
    if part == "mlp":
        assert {"base-mlp", "rotated-before", "rotated-lora_scratch-r64"} <= names
    if part == "lrsweep":
        assert "lrs-inverted-lora-r4-hfrozen-lr0.01-b0.003" in names


def test_best_validation_reads_the_lowest_val_loss_epoch():
    points = ((1.0, 0.6), (0.5, 0.8), (0.5, 0.85), (0.7, 0.9))
    scalars = {
        "val/loss": [(20 * i, loss) for i, (loss, _) in enumerate(points, 1)],
        "val/acc": [(20 * i, acc) for i, (_, acc) in enumerate(points, 1)],
    }
    # The first minimum: ModelCheckpoint keeps a checkpoint only on a strictly lower val/loss;
    # one validation per epoch: 4 epochs trained.
    best = {"epochs": 4, "val_loss": 0.5, "best_epoch": 2}
    assert runs.best_validation(scalars) == {**best, "val_acc": 0.8}
    assert runs.best_validation({"val/loss": scalars["val/loss"]}) == best
    assert runs.best_validation({}) == {}
    # A NaN validation loss never is the best (ModelCheckpoint ranks it as +inf).
    nan_first = {"val/loss": [(20, float("nan")), (40, 0.9), (60, 1.2)]}
    assert runs.best_validation(nan_first) == {"epochs": 3, "val_loss": 0.9, "best_epoch": 2}


def test_study_metrics_name_the_test_metrics_as_the_tables_do(tmp_path):
    folder = tmp_path / "logs"
    folder.mkdir()
    write_curves(folder, {(epoch, "val/loss"): loss for epoch, loss in enumerate((0.9, 0.4, 0.6))})
    ok = RunResult("lrs-rotated-full-lr0.001", 0, 1.0, "ok", {"test/acc": 0.9})
    fit = runs.best_validation(run_scalars(folder))
    assert fit == {"epochs": 3, "val_loss": pytest.approx(0.4), "best_epoch": 2}
    assert runs.study_metrics(ok, fit) == {**fit, "acc": 0.9}
    ok.metrics = {"test/token_acc": 0.7, "test/trainable_params": 512.0}
    assert runs.study_metrics(ok) == {"acc": 0.7, "trainable_params": 512}


def test_the_runs_csv_is_written_in_job_order(tmp_path):
    def run(seed: int, domain: str, adaptation: str, rank: int) -> RunResult:
        info = {"part": "mlp", "domain": domain, "adaptation": adaptation, "rank": rank}
        return RunResult(run_name(Variant(domain), seed), seed, 1.0, "ok", info=info)

    shuffled = [run(1, "quantized", "full", 0), run(0, "rotated", "lora", 2)]
    shuffled += [run(0, "quantized", "lora", 8), run(0, "quantized", "lora", 2)]
    shuffled += [run(0, "original", "base", 0)]
    runs.write_runs(tmp_path / "lora", "mlp", sorted(shuffled, key=runs.run_order))
    _, rows = read_csv(tmp_path / "lora_mlp_runs.csv")
    order = [(r["seed"], r["domain"], r["method"], r["rank"]) for r in rows]
    assert order == [
        ("0", "original", "base", "0"),
        ("0", "quantized", "lora", "2"),
        ("0", "quantized", "lora", "8"),
        ("0", "rotated", "lora", "2"),
        ("1", "quantized", "full", "0"),
    ]
