"""A plan's ``pages:`` section: the clear errors of a page that is not one (the pages that are
rebuilt from committed records: ``tests/docs/test_plan_pages.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab.studies.sweep import REPORTS, main


def _plan(tmp_path: Path, pages: dict, **options) -> list[str]:
    """A plan of one backend whose pages are ``pages``; the argv of its ``--report-only`` run."""
    plan = tmp_path / "page.yaml"
    text = {"config": ["base.yaml"], "backends": ["softmax"], "pages": pages, **options}
    plan.write_text(yaml.safe_dump(text))
    return ["--plan", str(plan), "--out", str(tmp_path / "page"), "--report-only"]


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
