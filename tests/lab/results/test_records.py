"""The one record reader: a run folder's record.json as a RunResult, folders found and filtered
by tags, curves and spikes read back, records published under docs/results/<study>/runs/."""

from __future__ import annotations

import gzip
import json

import pytest

from attn_lightning.records import run_files
from attn_lightning.records.run_files import write_curves, write_record, write_spikes
from lab.results import records
from lab.results.records import (
    GZIP_OVER,
    find_ok,
    load_run,
    load_runs,
    publish_run,
    run_scalars,
    run_spikes,
    study_runs_dir,
)


def _record(folder, *, variant="performer", seed=0, status="ok", **tags):
    write_record(
        folder,
        {
            "schema": 1,
            "experiment": "e",
            "run": folder.name,
            "seed": seed,
            "tags": {"study": "s", "variant": variant, "seed": seed, **tags},
            "status": status,
            "fit_seconds": 12.5,
            "global_step": 300,
            "metrics": {
                "fit": {"train/loss": 0.5, "val/loss": 0.9},
                "validate": {"val/loss": 0.7},
                "test": {"test/loss": 0.8},
            },
        },
    )
    return folder


def test_load_run_reads_the_record_as_the_runner_merged_metrics(tmp_path):
    folder = tmp_path / "performer-s3"
    folder.mkdir()
    _record(folder, seed=3, lr=0.01, backend="performer")
    run = load_run(folder)
    assert (run.variant, run.seed, run.status, run.seconds) == ("performer", 3, "ok", 12.5)
    assert run.global_step == 300 and run.log_dir == str(folder)
    # fit, then validate, then test: the validate value of val/loss wins over the fit's
    assert run.metrics == {"train/loss": 0.5, "val/loss": 0.7, "test/loss": 0.8}
    assert run.info == {"lr": 0.01, "backend": "performer"}  # study, variant, seed left out


def test_load_run_without_a_variant_tag_is_named_after_the_run(tmp_path):
    folder = tmp_path / "run-a"
    folder.mkdir()
    write_record(folder, {"run": "run-a", "seed": 1, "status": "crashed", "tags": {}})
    run = load_run(folder)
    assert (run.variant, run.seed, run.status, run.metrics) == ("run-a", 1, "crashed", {})


def test_load_run_names_a_missing_or_corrupt_record(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"record\.json"):
        load_run(tmp_path)
    (tmp_path / "record.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"record\.json is not valid JSON"):
        load_run(tmp_path)
    (tmp_path / "record.json").write_text("[1]")
    with pytest.raises(ValueError, match="not a JSON object"):
        load_run(tmp_path)
    (tmp_path / "record.json").write_text('{"tags": {}}')
    with pytest.raises(ValueError, match="has no seed"):
        load_run(tmp_path)


def test_load_runs_finds_every_record_sorted_and_filters_by_tags(tmp_path):
    for variant, seed, task in [("b", 1, "x"), ("a", 2, "x"), ("a", 0, "y"), ("a", 1, "x")]:
        folder = tmp_path / "exp" / f"{variant}-s{seed}"
        (folder / "test").mkdir(parents=True)  # a subcommand's own log folder holds no record
        _record(folder, variant=variant, seed=seed, task=task)
    (tmp_path / "exp" / "no-record").mkdir()
    runs = load_runs(tmp_path)
    assert [(r.variant, r.seed) for r in runs] == [("a", 0), ("a", 1), ("a", 2), ("b", 1)]
    assert [(r.variant, r.seed) for r in load_runs(tmp_path, task="x")] == [
        ("a", 1),
        ("a", 2),
        ("b", 1),
    ]
    assert load_runs(tmp_path, task="z") == [] and load_runs(tmp_path / "absent") == []


def test_load_runs_reads_each_record_once(tmp_path, monkeypatch):
    for seed in range(3):
        (tmp_path / f"a-s{seed}").mkdir()
        _record(tmp_path / f"a-s{seed}", seed=seed)
    read: list[object] = []
    load = run_files.load_record
    monkeypatch.setattr(records, "load_record", lambda f: read.append(f) or load(f))
    assert len(load_runs(tmp_path, study="s")) == 3 and len(read) == 3


def test_find_ok_takes_only_an_ok_record(tmp_path):
    for root, status in [("a", "crashed"), ("b", "ok")]:
        (tmp_path / root / "v-s0").mkdir(parents=True)
        _record(tmp_path / root / "v-s0", variant="v", status=status)
    assert find_ok([tmp_path / "a"], "v", 0) is None
    found = find_ok([tmp_path / "a", tmp_path / "b"], "v", 0)
    assert found is not None and found.log_dir == str(tmp_path / "b" / "v-s0")
    assert find_ok([tmp_path / "b"], "v", 1) is None
    assert find_ok([tmp_path / "b"], "v", 0, study="other") is None


def test_curves_and_spikes_read_back_gzipped_or_not(tmp_path):
    write_curves(tmp_path, {(10, "train/loss"): 0.5, (5, "train/loss"): 1.0})
    write_spikes(tmp_path, {7: (2.0, 3.0, 1.0, 4.0, 5.0, float("nan"))})
    assert run_scalars(tmp_path) == {"train/loss": [(5, 1.0), (10, 0.5)]}
    (spike,) = run_spikes(tmp_path)
    assert spike["step"] == 7 and spike["grad_norm"] == 4.0
    gz = tmp_path / "curves.csv.gz"
    gz.write_bytes(gzip.compress((tmp_path / "curves.csv").read_bytes()))
    (tmp_path / "curves.csv").unlink()
    assert run_scalars(tmp_path) == {"train/loss": [(5, 1.0), (10, 0.5)]}
    assert run_scalars(tmp_path / "absent") == {} and run_spikes(tmp_path / "absent") == []


def test_run_scalars_groups_the_curves_by_tag_in_step_order(tmp_path):
    write_curves(tmp_path, {(10, "a"): 0.5, (5, "a"): 1.0, (5, "b"): 2.0})
    assert run_scalars(tmp_path) == {"a": [(5, 1.0), (10, 0.5)], "b": [(5, 2.0)]}
    assert run_scalars(tmp_path / "absent") == {}


def test_publish_run_copies_the_record_and_gzips_large_curves(tmp_path):
    run = tmp_path / "logs" / "e" / "v-s0"
    run.mkdir(parents=True)
    _record(run, variant="v")
    write_spikes(run, {})
    write_curves(run, {(1, "t"): 1.0})
    (run / "config.yaml").write_text("x: 1\n")
    results = tmp_path / "docs" / "results"
    target = publish_run(run, "study", results)
    assert target == study_runs_dir("study", results) / "v-s0"
    assert sorted(p.name for p in target.iterdir()) == ["curves.csv", "record.json", "spikes.csv"]
    assert load_run(target).metrics == load_run(run).metrics
    write_curves(run, {(s, "train/loss"): s / 7 for s in range(GZIP_OVER // 10)})
    publish_run(run, "study", results)
    assert sorted(p.name for p in target.iterdir()) == [
        "curves.csv.gz",
        "record.json",
        "spikes.csv",
    ]
    assert len(run_scalars(target)["train/loss"]) == GZIP_OVER // 10
    assert json.loads((target / "record.json").read_text())["run"] == "v-s0"
    grouped = publish_run(run, "study", results, group="digits")  # runs sharing names
    assert grouped == study_runs_dir("study", results) / "digits" / "v-s0"
    assert [r.log_dir for r in load_runs(study_runs_dir("study", results))] == [
        str(grouped),
        str(target),
    ]


def test_publish_run_and_study_runs_dir_refuse_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"record\.json"):
        publish_run(tmp_path, "study", tmp_path)
    with pytest.raises(ValueError, match=r"study '\.\./up' is not a folder name"):
        study_runs_dir("../up")
    (tmp_path / "r").mkdir()
    _record(tmp_path / "r", variant="v")
    with pytest.raises(ValueError, match="group '' is not a folder name"):
        publish_run(tmp_path / "r", "s", tmp_path, group="")
