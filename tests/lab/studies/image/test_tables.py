"""``image.tables.write_paired`` (a plan page's ``paired`` report): the image page's per-seed and
paired tables come from the run records alone, and a wrong name, metric or path is a clear
error. (The committed page itself is rebuilt by its plan in tests/docs/test_plan_pages.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lab.studies.image.tables import write_paired
from lab.studies.sweep import main

DOCS = Path(__file__).resolve().parents[4] / "docs" / "results"
RUNS = DOCS / "image28_mnist5k" / "runs"
ORDER = ["softmax", "linear", "performer", "polysketch"]


def _tables(markdown: str) -> list[str]:
    return [block.strip() for block in markdown.split("\n\n") if block.startswith("| ")]


def test_the_committed_tables_are_the_ones_the_results_page_shows():
    per_backend, paired = _tables((DOCS / "image28_mnist5k_paired.md").read_text())
    page = (DOCS / "image_completion.md").read_text()
    assert per_backend in page and paired in page
    assert "| linear | +0.0141 / +0.0274 / +0.0061 | 3+ 0− of 3, sign p 0.25 |" in paired


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


def test_the_runs_are_read_from_their_records_alone(tmp_path):
    """A copy of the records with one value changed changes the table: the CSV is not read."""
    runs = tmp_path / "runs"
    shutil.copytree(RUNS, runs)
    record = runs / "linear-s0" / "record.json"
    data = json.loads(record.read_text())
    data["metrics"]["test"]["test/bits_per_dim"] = 1.9
    record.write_text(json.dumps(data))
    write_paired([runs], tmp_path / "b", command="x", variants=ORDER, control="softmax")
    assert (
        "| linear | 0 1 2 | 1.5248 ± 0.3249 | 1.9000 / 1.3429 / 1.3316 |"
        in (tmp_path / "b.md").read_text()
    )
