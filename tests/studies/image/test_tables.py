"""``studies.image tables``: the image page's per-seed and paired tables regenerate from the
committed run records, and a wrong name, metric or path is a clear error."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attn_lightning.studies.image import main

DOCS = Path(__file__).resolve().parents[3] / "docs" / "results"
RUNS = DOCS / "image28_mnist5k" / "runs"
ORDER = ["--variants", "softmax", "linear", "performer", "polysketch"]


def _tables(markdown: str) -> list[str]:
    return [block.strip() for block in markdown.split("\n\n") if block.startswith("| ")]


def test_the_committed_mnist5k_tables_and_the_page_are_what_the_command_writes(tmp_path):
    out = tmp_path / "image28_mnist5k_paired"
    main(["tables", "--runs", str(RUNS), *ORDER, "--control", "softmax", "--out", str(out)])
    ours = (tmp_path / "image28_mnist5k_paired.md").read_text()
    committed = (DOCS / "image28_mnist5k_paired.md").read_text()
    assert ours.replace(str(tmp_path), "docs/results").replace(str(DOCS), "docs/results") == (
        committed
    )
    for name in ("image28_mnist5k_paired.csv", "image28_mnist5k_paired_deltas.csv"):
        assert (tmp_path / name).read_text() == (DOCS / name).read_text()
    per_backend, paired = _tables(ours)
    page = (DOCS / "image_completion.md").read_text()
    assert per_backend in page and paired in page
    assert "| linear | +0.0141 / +0.0274 / +0.0061 | 3+ 0− of 3 |" in paired


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--control", "flash"], "has no runs of ['flash']"),
        (["--variants", "softmax", "liner"], "has no runs of ['liner']"),
        (["--metrics", "test/acc"], "has no metric ['test/acc']"),
    ],
)
def test_a_name_or_metric_the_csv_lacks_is_an_error_naming_what_it_has(
    tmp_path, capsys, extra, message
):
    with pytest.raises(SystemExit):
        main(["tables", "--runs", str(RUNS), "--out", str(tmp_path / "t"), *extra])
    error = capsys.readouterr().err
    assert message in error and ("softmax" in error or "test/bits_per_dim" in error)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_a_folder_without_records_is_an_error_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["tables", "--runs", str(tmp_path / "none"), "--out", str(tmp_path / "t")])
    assert "none" in capsys.readouterr().err


def test_the_runs_are_read_from_their_records_alone(tmp_path):
    """A copy of the records with one value changed changes the table: the CSV is not read."""
    runs = tmp_path / "runs"
    shutil.copytree(RUNS, runs)
    record = runs / "linear-s0" / "record.json"
    data = json.loads(record.read_text())
    data["metrics"]["test"]["test/bits_per_dim"] = 1.9
    record.write_text(json.dumps(data))
    out = tmp_path / "b"
    main(["tables", "--runs", str(runs), *ORDER, "--control", "softmax", "--out", str(out)])
    assert (
        "| linear | 0 1 2 | 1.5248 ± 0.3249 | 1.9000 / 1.3429 / 1.3316 |"
        in (tmp_path / "b.md").read_text()
    )
