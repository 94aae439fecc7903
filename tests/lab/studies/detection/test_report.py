"""The detection report kinds' refusals: a page without runs, a probe run without its rows or
checkpoint (the committed pages rebuilt from their records: ``tests/docs/test_plan_pages.py``)."""

from __future__ import annotations

import pytest

from attn_lightning.records import write_csv
from lab.studies.detection.report import write_page, write_probe
from tests.lab.studies.detection.runs import fake_record


def test_a_page_without_runs_to_show_is_refused(tmp_path):
    with pytest.raises(ValueError, match="give variants"):
        write_page([tmp_path], tmp_path / "p", command="c", seeds=[0])


def test_probe_page_reads_the_rows_kept_beside_each_record(tmp_path):
    folder = fake_record(tmp_path, "runs", "softmax", 0, test={"test/mAP": 0.5})
    row = {"variant": "softmax", "seed": 0, "layer": 0, "backend": "softmax"}
    row |= {"mass on objects": 0.25, "cells in objects": 0.2, "argmax spread": 0.5}
    row |= {"std across images": 0.03, "std across queries": 0.04, "query overlap": 0.125}
    write_csv(folder / "probe.csv", [row], {"batches": "4"}, float_digits=6)
    # a run with neither probe.csv nor a record, or a record but no local checkpoint, is named
    with pytest.raises(FileNotFoundError, match="no record of softmax seed 7 under"):
        write_probe(
            [tmp_path / "runs"], tmp_path / "p", command="c", variants=["softmax"], seeds=[7]
        )
    (folder / "probe.csv").unlink()
    with pytest.raises(FileNotFoundError, match=r"no probe\.csv beside the committed record"):
        write_probe(
            [tmp_path / "runs"], tmp_path / "p", command="c", variants=["softmax"], seeds=[0]
        )
    with pytest.raises(ValueError, match="batches must be >= 1, got 0"):
        write_probe([tmp_path], tmp_path / "p", command="c", variants=[], seeds=[0], batches=0)
