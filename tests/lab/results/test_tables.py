"""Study tables' arithmetic and cells: mean ± std, median [IQR], default columns, convergence,
the machine line, the curves table's columns (the tables themselves: rebuilt from records by
``tests/docs/test_plan_pages``)."""

from __future__ import annotations

import pytest

from attn_lightning.records.run_files import write_record
from lab.results.records import NOT_RUN, RunResult
from lab.results.tables import (
    Convergence,
    _shown_steps,
    curves_table,
    default_metrics,
    format_mean_std,
    format_median_iqr,
    format_number,
    mean_std,
    median_iqr,
    records_machine_line,
    summary_cell,
    write_tables,
)


def test_mean_std_is_sample_std_zero_for_one_none_for_none():
    assert mean_std([1.0, 3.0]) == (2.0, pytest.approx(2**0.5))
    assert mean_std([5.0]) == (5.0, 0.0)
    assert mean_std([]) == (None, None)


def test_format_mean_std_scales_and_rounds():
    assert format_mean_std(0.9876, 0.0123, scale=100, digits=1) == "98.8 ± 1.2"
    assert format_mean_std(2.0, None, digits=0) == "2 ± 0"
    assert format_mean_std(None, None) == "–"


def test_default_metrics_are_the_reported_test_metrics_known_first():
    results = [
        RunResult("a", 0, 1.0, "ok", {"test/zeta": 1.0, "test/loss": 0.5, "val/mAP": 0.1}),
        RunResult("a", 1, 1.0, "ok", {"test/token_acc": 0.9, "train/loss": 0.2}),
    ]
    assert default_metrics(results) == ["test/token_acc", "test/loss", "test/zeta"]


def test_convergence_in_both_directions():
    assert Convergence("test/acc", 0.9).converged(0.95)
    assert not Convergence("test/acc", 0.9).converged(None)
    low = Convergence("test/loss", 2.0, "min")
    assert low.converged(1.5) and not low.converged(2.5)
    assert low.describe() == "test/loss > 2.0"
    with pytest.raises(ValueError, match="direction"):
        Convergence("test/loss", 1.0, "down")


def test_median_iqr_interpolates_linearly_within_the_data():
    # Inclusive quartiles of 1..5: positions 1, 2, 3 of 0..4 -> 2, 3, 4 (numpy's percentile).
    assert median_iqr([5.0, 1.0, 3.0, 2.0, 4.0]) == (3.0, 2.0, 4.0)
    # Four values: the 25th percentile sits 3/4 of the way from 0 to 10.
    assert median_iqr([0.0, 10.0, 20.0, 100.0]) == (15.0, 7.5, 40.0)
    # Bimodal: the median follows the majority, unlike the mean (0.59 here).
    median, q25, q75 = median_iqr([1.0, 1.0, 1.0, 0.1, 0.1, 1.0, 1.0, 0.1, 0.1, 0.5])
    assert (median, q25, q75) == (pytest.approx(0.75), pytest.approx(0.1), 1.0)
    assert median_iqr([7.0]) == (7.0, 7.0, 7.0)
    assert median_iqr([]) == (None, None, None)


def test_format_median_iqr_scales_and_rounds():
    assert format_median_iqr(0.99871, 0.991, 1.0, scale=100) == "99.87 [99.10, 100.00]"
    assert format_median_iqr(*median_iqr([100, 200, 400]), digits=0) == "200 [150, 300]"
    assert format_median_iqr(*median_iqr([])) == "–"


def test_summary_cell_is_mean_std_or_median_iqr_in_the_metrics_column():
    row = {"test/acc_mean": 0.9, "test/acc_std": 0.01, "test/acc_median": 0.95}
    row |= {"test/acc_q25": 0.5, "test/acc_q75": 1.0, "steps_mean": 12.25, "steps_std": 0.5}
    assert summary_cell(row, "test/acc") == "90.00 ± 1.00"  # KNOWN: percent, 2 decimals
    assert summary_cell(row, "test/acc", iqr=True) == "95.00 [50.00, 100.00]"
    assert summary_cell(row, "steps") == "12.2500 ± 0.5000"  # unknown: 4 decimals by default
    assert summary_cell(row, "steps", digits=0) == "12 ± 0"


def test_a_value_its_decimals_would_show_as_zero_gets_significant_figures():
    # A converged run's loss at 4 decimals was "0.0000": nonzero values keep 3 figures.
    assert format_number(4.2e-6, digits=4) == "4.20e-06"
    assert format_number(0.0, digits=4) == "0.0000" and format_number(None) == "–"
    assert format_number(0.5, scale=100, digits=2) == "50.00"
    assert format_median_iqr(1e-9, 8.6e-10, 4.8e-7, digits=4) == "1.00e-09 [8.60e-10, 4.80e-07]"
    assert format_median_iqr(0.25, 1e-9, 0.5, digits=2) == "0.25 [0.00, 0.50]"  # by the median
    assert format_mean_std(3e-8, 1e-8, digits=4) == "3.00e-08 ± 1.00e-08"


def test_the_records_machine_line_names_where_the_runs_ran(tmp_path):
    folder = tmp_path / "v-s1"
    folder.mkdir()
    env = {"platform": "Linux-x", "device": "cpu", "device_name": None, "python": "3.11.7"}
    write_record(folder, {"seed": 1, "status": "ok", "environment": env})
    converted = RunResult("v", 0, 1.0, "ok", info={"machine": "Box A, x86_64, Python 3.12.3"})
    fresh = RunResult("v", 1, 1.0, "ok", log_dir=str(folder))
    assert records_machine_line([converted, converted], jobs=2) == (
        "Machine: Box A, x86_64, Python 3.12.3; 2 runs at a time."
    )
    assert records_machine_line([converted, fresh]) == (
        "Machines: Box A, x86_64, Python 3.12.3; Linux-x, cpu, Python 3.11.7; "
        "runs one after another."
    )
    # A crashed run or one without a record says nothing: this machine's line is used instead.
    assert records_machine_line([RunResult("v", 2, None, "crashed", log_dir=str(folder))]) is None
    assert records_machine_line([RunResult("v", 3, 1.0, "ok")]) is None


def test_shown_steps_keep_the_last_and_at_most_max_columns():
    assert _shown_steps([1, 2, 3], 8) == [1, 2, 3]
    assert _shown_steps(list(range(20, 820, 20)), 8) == [100, 200, 300, 400, 500, 600, 700, 800]
    shown = _shown_steps(list(range(1, 11)), 4)
    assert shown[-1] == 10 and len(shown) <= 4


def test_curves_table_can_show_every_step_with_its_own_digits():
    rows = [
        {"variant": "v", "seed": 0, "optimizer_steps": step, "val/token_acc": step / 100}
        for step in range(10, 100, 10)
    ]
    header, _, row = curves_table(rows, "val/token_acc", max_columns=None, digits=1)
    assert header.count("|") == 2 + 9 + 1  # every one of the 9 steps
    assert row.startswith("| `v` | 0 | 10.0 | 20.0 |")
    assert curves_table(rows, "val/token_acc")[0].count("|") <= 2 + 8 + 1  # at most 8 steps
    assert "| 10.00 |" in curves_table(rows[:1], "val/token_acc")[2]  # its column's 2 digits


def test_a_page_before_any_run_names_no_machine(tmp_path):
    # A plan committed before its runs (its predictions beside it) rebuilds the same page on any
    # machine: nothing ran, so no machine is named; the first run's record names its own.
    write_tables(tmp_path / "p", [RunResult("v", 0, None, NOT_RUN)], command="cmd")
    text = (tmp_path / "p.md").read_text()
    assert "Machine: none yet." in text and "Not run yet (no run record): `v` seeds 0." in text
