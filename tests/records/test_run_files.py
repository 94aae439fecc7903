"""The run record's files: the writer's read of its own record never fails the run."""

from __future__ import annotations

import logging

import pytest

from attn_lightning.records.run_files import load_record, read_record, write_record


def test_the_writer_starts_over_a_bad_record_with_a_warning_where_a_reader_fails(tmp_path, caplog):
    assert read_record(tmp_path) == {}
    write_record(tmp_path, {"status": "ok"})
    assert read_record(tmp_path) == load_record(tmp_path) == {"status": "ok"}
    for bad in ("{not json", "[1, 2]"):
        (tmp_path / "record.json").write_text(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="attn_lightning"):
            assert read_record(tmp_path) == {}
        assert "starting a new one" in caplog.text
        with pytest.raises(ValueError, match=r"record\.json"):
            load_record(tmp_path)
