"""The warm-start tables rebuilt from a committed runs CSV: the same numbers, nothing trained."""

from __future__ import annotations

import pytest

from attn_lightning.results.records import RunResult
from attn_lightning.studies.warm_start import tables
from attn_lightning.studies.warm_start.cli import main
from attn_lightning.studies.warm_start.committed import read_runs


def _run(backend: str, condition: str, seed: int, acc: float) -> RunResult:
    run = RunResult(
        f"{backend}@{condition}", seed, 12.3, "ok", {"test/acc": acc, "test/loss": 1 - acc}, 800
    )
    run.info.update(backend=backend, condition=condition)
    return run


def test_tables_from_the_runs_csv_give_the_same_numbers(tmp_path):
    runs = [_run("softmax", "base", s, 0.9 + s / 100) for s in range(3)]
    runs += [_run("linear", "fine-tune", s, a) for s, a in enumerate([0.9, 0.92, 0.95])]
    runs += [_run("linear", "scratch", s, a) for s, a in enumerate([0.5, 0.6, 0.96])]
    first = tmp_path / "first"
    tables.write(
        first,
        runs,
        backends=["softmax", "linear"],
        metrics=["test/acc", "test/loss"],
        command="c",
        heading="h",
    )
    back = read_runs(tmp_path / "first_runs.csv")
    assert [(r.variant, r.seed, r.info["condition"]) for r in back][:2] == [
        ("softmax@base", 0, "base"),
        ("softmax@base", 1, "base"),
    ]
    assert back[3].metrics == pytest.approx({"test/acc": 0.9, "test/loss": 0.1})
    again = tmp_path / "again"
    main(
        [
            "tables",
            "--task",
            "digits",
            "--runs",
            str(tmp_path / "first_runs.csv"),
            "--out",
            str(again),
        ]
    )
    for suffix in (".csv", "_paired.csv", "_runs.csv"):
        name = f"{{}}{suffix}"
        assert (tmp_path / name.format("again")).read_text() == (
            tmp_path / name.format("first")
        ).read_text(), suffix
    page = (tmp_path / "again.md").read_text()
    assert "warm_start tables --task digits" in page and "Rebuilt from the committed" in page
    assert "(n=3, t: 2+ 1− 0=)" in page  # three seeds: a Student-t interval, marked


def test_a_csv_without_the_warm_start_columns_is_one_clear_error(tmp_path):
    path = tmp_path / "other_runs.csv"
    path.write_text("variant,seed,status,seconds,global_step,test/acc\nsoftmax,0,ok,1.0,10,0.9\n")
    with pytest.raises(ValueError, match="not a warm-start runs CSV: no column backend, condition"):
        read_runs(path)
    with pytest.raises(FileNotFoundError, match=r"nothing_runs\.csv"):
        read_runs(tmp_path / "nothing_runs.csv")
