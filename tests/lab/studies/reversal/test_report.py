"""The reversal report: numbers and files from fake run records, in the formats of the committed
reports (golden files)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from attn_lightning.records.files import read_csv
from attn_lightning.records.run_files import load_record, write_record
from lab.results.records import RunResult, run_scalars
from lab.studies.reversal.dynamics import spike_steps, steps_to_threshold
from lab.studies.reversal.report import report
from lab.studies.reversal.runs import chosen_runs
from lab.studies.reversal.summary import CARRIED, SPIKE_COLUMNS, summarize_variant
from tests.lab.studies.reversal.fake_runs import (
    EXPERIMENT,
    POLY,
    SEED1,
    test_metrics,
    write_curves,
    write_mixed_study,
    write_run,
)

GOLDEN = Path(__file__).with_name("golden")


def _read_csv(path: Path) -> list[dict[str, str]]:
    return read_csv(path)[1]


def _runs(root: Path) -> list[Path]:
    return [root / "logs" / EXPERIMENT]


def _load(roots: list[Path]) -> list[RunResult]:
    """Every run recorded under ``roots`` (``chosen_runs`` of every variant, at 0.99)."""
    return chosen_runs(roots, None, 0.99)[1]


def test_run_scalars_give_back_every_point(study):
    scalars = run_scalars(study / "logs" / EXPERIMENT / f"{POLY}-s0")
    assert len(scalars["train/loss_spike"]) == 200  # every step, nothing subsampled
    assert spike_steps(scalars) == [130, 160]
    assert steps_to_threshold(scalars, 0.99) == 149
    assert scalars["grad/attention"][6] == (120, 50.0)


def test_runs_carry_their_training_facts_in_info(study):
    runs = {(r.variant, r.seed): r for r in _load(_runs(study))}
    first = runs[(POLY, 0)]
    assert (first.status, first.seconds, first.global_step) == ("ok", 100.0, 200)
    assert first.metrics["test/exact_acc"] == 0.9 and "val/token_acc" not in first.metrics
    assert (first.info["steps_to_threshold"], first.info["spikes"]) == (149, 2)
    assert first.info["max_grad_norm"] == 10.0 and len(first.info["spike_gradients"]) == 2
    assert first.info["best_ckpt_step"] == 100
    assert first.info["final_val_loss"] == 0.2
    assert [step for step, _ in first.info["val_curve"]] == [49, 99, 149, 199]
    unfinished = runs[("softmax", 1)]
    assert (unfinished.status, unfinished.metrics, unfinished.seconds) == ("unfinished", {}, None)
    assert "spikes" not in unfinished.info  # a record not ok is left out of every number


def test_missing_or_empty_runs_folder_is_an_error_naming_it(tmp_path):
    with pytest.raises(FileNotFoundError, match=f"{tmp_path / 'nope'} does not exist"):
        _load([tmp_path / "nope"])
    with pytest.raises(FileNotFoundError, match=f"{tmp_path} holds no run record"):
        _load([tmp_path])


def test_a_run_recorded_twice_keeps_its_finished_record(study, tmp_path):
    # A study continued elsewhere: softmax seed 1 running in one folder, ok in another.
    write_run(tmp_path, "softmax", 1, SEED1, test_metrics(1.0, 1.0, 0.002))
    for roots in ([*_runs(study), *_runs(tmp_path)], [*_runs(tmp_path), *_runs(study)]):
        runs = {(r.variant, r.seed): r for r in _load(roots)}
        assert runs[("softmax", 1)].status == "ok"
        assert runs[("softmax", 1)].value("test/loss") == 0.002


def test_converted_runs_carry_their_facts_and_a_curve_overrides_them(tmp_path):
    # A run converted from a report's runs CSV: its facts are fit metrics; a curve recomputes
    # the report-time one (steps to the threshold) and the others stay the CSV's.
    folder = write_run(tmp_path, "softmax", 0, None, test_metrics(1.0, 1.0, 0.001))
    record = load_record(folder)
    record["metrics"]["fit"] = {"steps_to_threshold": 999, "spikes": 3, "max_grad_norm": 2.5}
    record["source"] = {"converted_from": "docs/results/x_runs.csv"}
    write_record(folder, record)
    (run,) = _load(_runs(tmp_path))
    assert (run.info["steps_to_threshold"], run.info["spikes"], run.info["max_grad_norm"]) == (
        999,
        3,
        2.5,
    )
    assert run.info["sources"] == ["x_runs.csv"] and "val/token_acc" not in run.metrics
    row = summarize_variant("softmax", [run], 0.99)
    assert row["spike_records"] is None  # 3 spikes, no gradient curves: unknown, not 0
    carried = {"spike_records": 3, "spike_grad_ratio_median": 7.5, "spike_grad_lag_median": 2}
    carried |= {"spike_top_group": "attention", "spike_top_group_count": 2}
    record["tags"][CARRIED] = carried  # the variant's columns from the page's summary CSV
    write_record(folder, record)
    row = summarize_variant("softmax", _load(_runs(tmp_path)), 0.99)
    assert {k: row[k] for k in SPIKE_COLUMNS} == carried
    write_curves(folder, {"val/token_acc": [(49, 0.5), (99, 0.995)]})
    (run,) = _load(_runs(tmp_path))
    assert (run.info["steps_to_threshold"], run.info["spikes"]) == (99, 3)


def test_report_summary_numbers(study, tmp_path):
    summary = report(_runs(study), tmp_path / "rep", command="c")
    assert [r["variant"] for r in summary] == [POLY, "softmax"]  # sorted labels
    poly, soft = summary
    assert (poly["runs"], poly["converged"], poly["unfinished"]) == (3, 2, 0)
    assert (soft["runs"], soft["converged"], soft["unfinished"]) == (1, 1, 1)
    # Token accuracies 0.40, 0.995, 0.999: inclusive quartiles interpolate halfway.
    assert poly["test/token_acc_median"] == pytest.approx(0.995)
    assert poly["test/token_acc_q25"] == pytest.approx(0.6975)
    assert poly["test/token_acc_q75"] == pytest.approx(0.997)
    assert poly["test/loss_median"] == pytest.approx(0.02)
    # Steps to 99 %: 149 and 99 (seed 2 never reached it).
    assert poly["reached"] == 2
    assert (poly["steps_to_threshold_median"], poly["steps_to_threshold_q25"]) == (124, 111.5)
    # Spikes per run 2, 0, 1.
    assert (poly["spikes_median"], poly["spikes_q25"], poly["spikes_q75"]) == (1, 0.5, 1.5)
    assert poly["spikes_max"] == 2
    # Ratios 10, 4, 3 -> 4; groups attention, feedforward, attention; lags 10, 0, 0.
    assert poly["spike_records"] == 3
    assert poly["spike_grad_ratio_median"] == pytest.approx(4.0)
    assert (poly["spike_top_group"], poly["spike_top_group_count"]) == ("attention", 2)
    assert poly["spike_grad_lag_median"] == 0
    assert (soft["spikes_max"], soft["spike_records"], soft["spike_top_group"]) == (0, 0, None)


def test_report_files(study, tmp_path):
    out = tmp_path / "rep"
    report(_runs(study), out, command="the command")
    md = out.with_name("rep.md").read_text()
    assert "```bash\nthe command\n```" in md and "Machine" in md
    assert f"| `{POLY}` | 2/3 | 0 | 99.50 [69.75, 99.70] |" in md
    assert (
        f"| `{POLY}` | 124 [112, 136] | 2/3 | 1.0 [0.5, 1.5] | 2 | 3 | 4.00 | 0 | attention (2) |"
        in md
    )
    assert f"| `{POLY}` | 2 | ok | 40.00 | 0.00 | 40.00 | 0.00 | 1.5000 | – | 1 | 3.000 |" in md
    assert "| `softmax` | 1 | unfinished |" in md
    rows = {r["variant"]: r for r in _read_csv(out.with_name("rep.csv"))}
    assert float(rows[POLY]["test/token_acc_q25"]) == pytest.approx(0.6975)
    assert rows["softmax"]["converged"] == "1" and rows["softmax"]["unfinished"] == "1"
    runs = _read_csv(out.with_name("rep_runs.csv"))
    assert [(r["variant"], r["seed"], r["status"]) for r in runs] == [
        (POLY, "0", "ok"),
        (POLY, "1", "ok"),
        (POLY, "2", "ok"),
        ("softmax", "0", "ok"),
        ("softmax", "1", "unfinished"),
    ]
    first = runs[0]
    assert (first["steps_to_threshold"], first["spikes"], first["max_grad_norm"]) == (
        "149",
        "2",
        "10.0",
    )
    assert (first["fit_seconds"], first["global_step"], first["test/exact_acc"]) == (
        "100.0",
        "200",
        "0.9",
    )
    assert runs[2]["steps_to_threshold"] == ""  # never reached
    curves = _read_csv(out.with_name("rep_curves.csv"))
    assert [r["optimizer_steps"] for r in curves[:4]] == ["50", "100", "150", "200"]
    seed0 = [float(r["val/token_acc"]) for r in curves[:4]]
    assert seed0 == [0.5, 0.98, 0.995, 0.999]
    assert len(curves) == 4 * 4  # 4 validations of each finished run (unfinished: not read)
    assert "| `softmax` | 0 | 70.0 | 99.1 | 99.9 | 99.9 |" in md  # SEED1's curve, in percent


def _same_files(out: Path, stem: str) -> None:
    written = sorted(p.name for p in out.iterdir() if p.name.startswith(f"{stem}."))
    written += sorted(p.name for p in out.iterdir() if p.name.startswith(f"{stem}_"))
    golden = sorted(p.name for p in GOLDEN.iterdir() if p.name.startswith(f"{stem}."))
    golden += sorted(p.name for p in GOLDEN.iterdir() if p.name.startswith(f"{stem}_"))
    assert written == golden
    for name in golden:
        assert (out / name).read_bytes() == (GOLDEN / name).read_bytes(), name


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_mixed_study(tmp_path_factory.mktemp("mixed"))


def test_files_keep_the_committed_formats(mixed, tmp_path, elsewhere):
    # Runs without test metrics, without logs, with some metrics only; a control; a filter,
    # a threshold and a spec; a variant without runs (header-only tables). Written as by
    # another machine: the pages with runs name the runs' machine, the one without names it.
    report(_runs(mixed), tmp_path / "all", command="the command", control="softmax")
    spec = "polynomial:degree=4,normalize=false"
    report(
        _runs(mixed),
        tmp_path / "some",
        command="another command",
        threshold=0.995,
        variants=["performer", spec, "linear"],
        control=spec,
    )
    report(_runs(mixed), tmp_path / "none", command="c", variants=["nothing"])
    for stem in ("all", "some", "none"):
        _same_files(tmp_path, stem)


def test_golden_comparison_can_fail(mixed, tmp_path):
    report(_runs(mixed), tmp_path / "all", command="the command", control="softmax")
    shutil.copy(tmp_path / "all_runs.csv", tmp_path / "all.csv")  # a wrong summary
    with pytest.raises(AssertionError, match=r"all\.csv"):
        _same_files(tmp_path, "all")


def test_the_machine_line_names_where_every_recorded_run_ran(tmp_path):
    # A finished run on one machine, one still running on another, and a finished run whose
    # record has no test metrics on a third: the page names all three.
    envs = {}
    for seed, (test, cpu) in enumerate(
        [(test_metrics(1.0, 1.0, 0.001), "A"), (None, "B"), ({}, "C")]
    ):
        folder = write_run(tmp_path, "softmax", seed, SEED1, test)
        record = load_record(folder)
        record["environment"] = envs[cpu] = {"platform": "Linux", "device": cpu, "python": "3.11"}
        write_record(folder, record)
    report(_runs(tmp_path), tmp_path / "m", command="c")
    machines = "; ".join(f"Linux, {cpu}, Python 3.11" for cpu in envs)
    assert f"\nMachines: {machines}; runs one after another.\n" in (tmp_path / "m.md").read_text()


def test_a_record_converted_from_several_csvs_names_each(tmp_path):
    folder = write_run(tmp_path, "softmax", 0, None, test_metrics(1.0, 1.0, 0.001))
    record = load_record(folder)
    record["source"] = {"converted_from": ["docs/results/x_runs.csv", "docs/results/x_spikes.csv"]}
    write_record(folder, record)
    (run,) = _load(_runs(tmp_path))
    assert run.info["sources"] == ["x_runs.csv", "x_spikes.csv"]
