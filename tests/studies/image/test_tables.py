"""``studies.image tables``: the image page's per-seed and paired tables regenerate from the
committed runs CSV, and a wrong name, metric or path is a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_lightning.studies.image import main

DOCS = Path(__file__).resolve().parents[3] / "docs" / "results"
RUNS = DOCS / "image28_mnist5k_runs.csv"


def _tables(markdown: str) -> list[str]:
    return [block.strip() for block in markdown.split("\n\n") if block.startswith("| ")]


def test_the_committed_mnist5k_tables_and_the_page_are_what_the_command_writes(tmp_path):
    out = tmp_path / "image28_mnist5k_paired"
    main(["tables", "--runs", str(RUNS), "--control", "softmax", "--out", str(out)])
    ours = (tmp_path / "image28_mnist5k_paired.md").read_text()
    committed = (DOCS / "image28_mnist5k_paired.md").read_text()
    assert (
        ours.replace(str(tmp_path), "docs/results").replace(str(DOCS), "docs/results") == committed
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


def test_a_missing_runs_csv_is_an_error_naming_it(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["tables", "--runs", str(tmp_path / "none_runs.csv"), "--out", str(tmp_path / "t")])
    assert "none_runs.csv" in capsys.readouterr().err


def test_a_sweep_over_backends_labels_its_runs_backend(tmp_path):
    runs = tmp_path / "b_runs.csv"
    runs.write_text(RUNS.read_text().replace("variant,seed", "backend,seed", 1))
    main(["tables", "--runs", str(runs), "--control", "softmax", "--out", str(tmp_path / "b")])
    assert "| linear | +0.0141 / +0.0274 / +0.0061 |" in (tmp_path / "b.md").read_text()
