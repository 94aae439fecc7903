"""A plan's ``pages:`` section: reversal pages (variants, threshold, control) written by the sweep
from run records, and the clear errors of a page that is not one."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from attn_lightning.records.files import read_csv
from lab.studies.reports import REPORTS
from lab.studies.sweep import main
from tests.lab.studies.reversal.fake_runs import EXPERIMENT, POLY

SPEC = "polynomial:degree=4,normalize=false"


def _plan(tmp_path: Path, pages: dict, **options) -> list[str]:
    """A plan of one backend whose pages are ``pages``; the argv of its ``--report-only`` run."""
    plan = tmp_path / "page.yaml"
    text = {"config": ["base.yaml"], "backends": ["softmax"], "pages": pages, **options}
    plan.write_text(yaml.safe_dump(text))
    return ["--plan", str(plan), "--out", str(tmp_path / "page"), "--report-only"]


def test_a_reversal_page_picks_orders_and_thresholds_its_variants(study, tmp_path):
    runs = str(study / "logs" / EXPERIMENT)
    page = {"report": "reversal", "runs": [runs], "variants": ["softmax", SPEC]}
    main(_plan(tmp_path, {"cli": {**page, "threshold": 0.999}}))
    summary = read_csv(tmp_path / "cli.csv")[1]
    assert [r["variant"] for r in summary] == ["softmax", POLY]  # a spec names its label
    # At 0.999 seed 1 (test 0.995) no longer converges; its validation reaches 0.999 at step
    # 149, seed 0's at 199.
    assert (summary[1]["converged"], summary[1]["reached"]) == ("1", "2")
    assert float(summary[1]["steps_to_threshold_median"]) == 174
    command = f"python -m lab.studies.sweep --plan {tmp_path / 'page.yaml'} --out"
    assert f"```bash\n{command}" in (tmp_path / "cli.md").read_text()
    # Pages beside the plan's own page: its sweep table is written too.
    assert (tmp_path / "page.md").is_file()
    main(_plan(tmp_path, {"only": {**page, "variants": ["softmax"]}}))
    assert POLY not in (tmp_path / "only_runs.csv").read_text()


def test_a_page_named_as_the_plan_replaces_its_sweep_table(study, tmp_path):
    runs = str(study / "logs" / EXPERIMENT)
    main(_plan(tmp_path, {"page": {"report": "reversal", "runs": [runs]}}))
    assert "reached" in read_csv(tmp_path / "page.csv")[1][0]  # the reversal summary
    text = (tmp_path / "page.md").read_text()
    assert "steps to 99 %" in text  # the reversal report, not the sweep's table


def test_control_adds_paired_differences_over_shared_seeds(study, tmp_path):
    runs = str(study / "logs")
    page = {"report": "reversal", "runs": [runs], "variants": ["softmax", POLY]}
    main(_plan(tmp_path, {"paired": {**page, "control": "softmax"}}))
    (row,) = read_csv(tmp_path / "paired_paired.csv")[1]
    # Only seed 0 finished in both (softmax seed 1 is unfinished): one pair, no interval.
    assert (row["variant"], row["control"], row["Δ test loss n"]) == (POLY, "softmax", "1")
    assert float(row["Δ test loss mean"]) == pytest.approx(0.01 - 0.001)
    assert float(row["Δ token acc (pp) mean"]) == pytest.approx((0.999 - 1.0) * 100)
    text = (tmp_path / "paired.md").read_text()
    assert f"| `{POLY}` | `softmax` | +0.00900 (n=1: 1+ 0− 0=) |" in text


@pytest.mark.parametrize(
    ("pages", "message"),
    [
        ({"x": {"report": "outcomes"}}, "pages: x: report 'outcomes'; the reports are"),
        (
            {"x": {"runs": ["a"]}},
            f"pages: x: report None; the reports are {list(REPORTS)}",
        ),
        (
            {"x": {"report": "reversal", "control_": "softmax"}},
            "pages: x: unknown key 'control_'; the keys of a reversal page are report, runs, ",
        ),
        ({"x": "reversal"}, "pages: give a mapping of page names to {report: KIND"),
    ],
)
def test_a_bad_page_is_one_clear_error_before_any_run(tmp_path, capsys, pages, message):
    argv = _plan(tmp_path, pages)
    with pytest.raises(SystemExit) as exit_info:
        main(argv[:-1])  # not --report-only: nothing may train
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and message in err and "page.yaml" in err
    assert not (tmp_path / "page").exists()


def test_a_missing_runs_folder_is_an_error_naming_it(tmp_path, capsys):
    missing = tmp_path / "nope" / "runs"
    with pytest.raises(SystemExit):
        main(_plan(tmp_path, {"x": {"report": "reversal", "runs": [str(missing)]}}))
    assert f"page x: runs folder {missing} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "x.md").exists()


def test_one_runs_folder_may_be_given_without_a_list(study, tmp_path):
    runs = str(study / "logs" / EXPERIMENT)
    main(_plan(tmp_path, {"one": {"report": "reversal", "runs": runs}}))
    assert [r["variant"] for r in read_csv(tmp_path / "one.csv")[1]] == [POLY, "softmax"]
