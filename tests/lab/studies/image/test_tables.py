"""``image.tables.write_paired`` (a plan page's ``paired`` report): a wrong name, metric or path
is a clear error. (The committed page is rebuilt by its plan in tests/docs/test_plan_pages.py,
and image_completion.md quotes its tables in include blocks checked there.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.studies.image.tables import write_paired
from lab.studies.sweep import main

DOCS = Path(__file__).resolve().parents[4] / "docs" / "results"
RUNS = DOCS / "image28_mnist5k" / "runs"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"control": "flash"}, "has no runs of ['flash']"),
        ({"variants": ["softmax", "liner"]}, "has no runs of ['liner']"),
        ({"metrics": ["test/acc"]}, "has no metric ['test/acc']"),
    ],
)
def test_a_name_or_metric_the_records_lack_is_an_error_naming_what_they_have(
    tmp_path, options, message
):
    with pytest.raises(ValueError, match=r"softmax|test/bits_per_dim") as error:
        write_paired([RUNS], tmp_path / "t", command="x", **options)
    assert message in str(error.value)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_a_plan_page_over_a_folder_without_records_is_an_error_naming_it(tmp_path, capsys):
    plan = tmp_path / "p.yaml"
    page = f"{{report: paired, runs: [{tmp_path / 'none'}]}}"
    plan.write_text(f"config: [base.yaml]\nbackends: [softmax]\npages:\n  p: {page}\n")
    with pytest.raises(SystemExit):
        main(["--plan", str(plan), "--out", str(tmp_path / "p"), "--report-only"])
    assert f"page p: no run records (record.json) under `{tmp_path / 'none'}/`" in (
        capsys.readouterr().err
    )
