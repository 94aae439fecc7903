"""The results room's writers: CSV with a provenance header read back, markdown tables, the
environment line."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from attn_lightning.records import (
    environment,
    machine_line,
    markdown_records,
    markdown_table,
    read_csv,
    write_csv,
)


@dataclass
class _Row:
    backend: str
    ms: float
    gflops: float | None


def test_markdown_table_prints_none_empty_and_escapes_bars():
    assert markdown_table(["a", "b"], [[1, None]]) == "| a | b |\n|---|---|\n| 1 |  |"
    assert markdown_table(["a"], [["x|y"]]).splitlines()[2] == "| x\\|y |"


def test_markdown_records_takes_the_header_from_the_keys():
    table = markdown_records([{"a": "1", "b": "2"}, {"a": "3", "b": "4"}])
    assert table.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 |", "| 3 | 4 |"]
    assert markdown_records([]) == ""


def test_csv_roundtrip_with_meta_and_none(tmp_path):
    meta = {"device": "cpu: test", "command": "x --y"}
    path = write_csv(tmp_path / "sub" / "r.csv", [_Row("linear", 1.5, None)], meta)
    got_meta, rows = read_csv(path)
    assert got_meta == meta
    assert rows == [{"backend": "linear", "ms": "1.5", "gflops": ""}]


def test_csv_fields_and_float_digits(tmp_path):
    rows = [{"a": 1 / 3, "b": 2}, {"b": 3, "c": "x"}]
    path = write_csv(tmp_path / "r.csv", rows, fields=["b", "a"], float_digits=3)
    assert path.read_text().splitlines() == ["b,a", "2,0.333", "3,"]
    _, back = read_csv(write_csv(tmp_path / "all.csv", rows))
    assert [list(r) for r in back] == [["a", "b", "c"]] * 2  # every key, first seen first


def test_read_csv_names_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.csv"):
        read_csv(tmp_path / "nope.csv")


def test_environment_records_versions_and_settings():
    meta = environment(torch.device("cpu"), command="python -m x --a 1", budget_s=5)
    assert torch.__version__ in meta["versions"] and meta["budget_s"] == "5"
    assert meta["device"].startswith("cpu:") and meta["command"] == "python -m x --a 1"


def test_machine_line_says_how_runs_shared_the_machine():
    assert machine_line().endswith("runs one after another.")
    assert machine_line(jobs=2).endswith("2 runs at a time.")


def test_reference_reads_the_cited_csv_and_names_a_missing_one(tmp_path, monkeypatch):
    from lab.results.references import ENV, reference

    write_csv(tmp_path / "paper.csv", [{"model": "linear", "bpd": 0.644}], {"source": "a paper"})
    monkeypatch.setenv(ENV, str(tmp_path))
    meta, rows = reference("paper")
    assert meta == {"source": "a paper"} and rows == [{"model": "linear", "bpd": "0.644"}]
    with pytest.raises(FileNotFoundError, match=ENV):
        reference("absent")
