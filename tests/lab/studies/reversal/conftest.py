"""The fake sweep the reversal report's tests read (written once per module)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab.studies.reversal.fake_runs import write_study


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sweep folder with ``sweeps/`` and ``logs/`` (``fake_runs.write_study``)."""
    return write_study(tmp_path_factory.mktemp("study"))
