"""Every page of the detection study is rebuilt from its committed run records (and its measured
costs) into exactly the committed page and CSVs: a page or CSV edited by hand, or records that
no longer give the page, fail."""

from __future__ import annotations

import pytest

from lab.studies.detection.report import PAGES, write_page
from tests.docs.pages import RESULTS


@pytest.mark.parametrize("name", list(PAGES))
def test_page_is_its_records(name, tmp_path):
    write_page(name, out_dir=tmp_path)
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(
        f"{name}{suffix}" for suffix in (".md", ".csv", "_runs.csv", "_curves.csv")
    )
    for file in written:
        assert (tmp_path / file).read_text() == (RESULTS / file).read_text(), file
