"""The detection report kinds on run records alone: the runs a page asks for, in its order, its
curves from the records' curves, a missing run named; the probe's rows kept beside a record."""

from __future__ import annotations

import csv

import pytest

from attn_lightning.records import write_csv
from lab.studies.detection.report import write_page, write_probe
from tests.lab.studies.detection.runs import fake_record

METHOD, CONTROL = "optimization_encoder_self", "softmax_no_qk_encoder_self"
COMMAND = "python -m lab.studies.sweep --plan configs/studies/detection_long.yaml"


def test_a_page_is_its_records(tmp_path):
    runs = tmp_path / "runs"
    for seed, m_ap in enumerate((0.80, 0.82, 0.81)):
        curve = {499: m_ap - 0.1, 999: m_ap}
        fake_record(runs, "long", CONTROL, seed, test={"test/mAP": m_ap}, curve=curve)
    for seed, m_ap in enumerate((0.83, 0.84)):  # seed 2 has no record: not run
        fake_record(runs, "long", METHOD, seed, test={"test/mAP": m_ap})
    out = tmp_path / "detection_long"
    results = write_page([runs], out, command=COMMAND, variants=[METHOD, CONTROL], seeds=[0, 1, 2])
    assert [(r.variant, r.seed, r.status) for r in results] == [
        (METHOD, 0, "ok"),
        (METHOD, 1, "ok"),
        (METHOD, 2, "not run"),
        (CONTROL, 0, "ok"),
        (CONTROL, 1, "ok"),
        (CONTROL, 2, "ok"),
    ]
    md = (tmp_path / "detection_long.md").read_text()
    assert f"{COMMAND}\n" in md
    assert f"| `{METHOD}` | 2 | 0 | 0.835 ± 0.007 |" in md
    # paired by seed over the two seeds both have: +0.03, +0.02
    assert "| +0.025 [-0.039, +0.089] (n=2) |" in md
    assert f"`{METHOD}` seeds 2." in md
    # the curves table and CSV: the records' val/mAP at step s is after s + 1 optimiser steps
    assert f"| `{CONTROL}` | 0 | 0.700 | 0.800 |" in md
    with (tmp_path / "detection_long_curves.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["optimizer_steps"] for r in rows] == ["500", "1000"] * 3
    assert {r["variant"] for r in rows} == {CONTROL}


def test_a_page_without_runs_to_show_is_refused(tmp_path):
    with pytest.raises(ValueError, match="give variants"):
        write_page([tmp_path], tmp_path / "p", command="c", seeds=[0])


def test_probe_page_reads_the_rows_kept_beside_each_record(tmp_path):
    folder = fake_record(tmp_path, "runs", "softmax", 0, test={"test/mAP": 0.5})
    row = {"variant": "softmax", "seed": 0, "layer": 0, "backend": "softmax"}
    row |= {"mass on objects": 0.25, "cells in objects": 0.2, "argmax spread": 0.5}
    row |= {"std across images": 0.03, "std across queries": 0.04, "query overlap": 0.125}
    write_csv(folder / "probe.csv", [row], {"batches": "4"}, float_digits=6)
    rows = write_probe(
        [tmp_path / "runs"], tmp_path / "p", command="c", variants=["softmax"], seeds=[0]
    )
    assert rows == [row]  # ints and floats read back as they were written
    assert (
        "| softmax | 0 | 0 | softmax | 0.25 | 0.2 | 0.5 | 0.03 | 0.04 | 0.125 |"
        in (tmp_path / "p.md").read_text()
    )
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
