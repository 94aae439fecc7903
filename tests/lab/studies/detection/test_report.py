"""The detection study's pages from run records alone: the runs a page asks for, in its order,
its curves from the records' curves, a missing run named, another experiment's runs left out."""

from __future__ import annotations

import csv

import pytest

from lab.studies.detection import main
from lab.studies.detection.report import PAGES, write_page
from tests.lab.studies.detection.runs import fake_record

METHOD, CONTROL = PAGES["detection_long"].variants


def test_a_page_is_its_records(tmp_path):
    runs = tmp_path / "runs"
    for seed, m_ap in enumerate((0.80, 0.82, 0.81)):
        curve = {499: m_ap - 0.1, 999: m_ap}
        fake_record(runs, "detection_long", CONTROL, seed, test={"test/mAP": m_ap}, curve=curve)
    for seed, m_ap in enumerate((0.83, 0.84)):  # seed 2 has no record: not run
        fake_record(runs, "detection_long", METHOD, seed, test={"test/mAP": m_ap})
    # the same run name in another experiment is not this page's
    fake_record(runs, "detection_report", METHOD, 2, test={"test/mAP": 0.1})
    results = write_page("detection_long", runs_dir=runs, out_dir=tmp_path)
    assert [(r.variant, r.seed, r.status) for r in results] == [
        (METHOD, 0, "ok"),
        (METHOD, 1, "ok"),
        (METHOD, 2, "not run"),
        (CONTROL, 0, "ok"),
        (CONTROL, 1, "ok"),
        (CONTROL, 2, "ok"),
    ]
    md = (tmp_path / "detection_long.md").read_text()
    assert "python -m lab.studies.detection report detection_long\n" in md
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


def test_report_names_the_pages_it_knows(capsys):
    with pytest.raises(SystemExit):
        main(["report", "detection_nothing"])
    assert "no page detection_nothing; allowed: detection_runs" in capsys.readouterr().err
    with pytest.raises(ValueError, match="no detection page 'x'; allowed: detection_runs"):
        write_page("x")
