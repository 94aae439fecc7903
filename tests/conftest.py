"""Fixtures shared across the test folders."""

from __future__ import annotations

import sys

import pytest


@pytest.fixture
def cli_workdir(tmp_path, monkeypatch):
    """Run ``train.py``'s CLI in a fresh folder (its logs/ and checkpoints/ land there), with a
    clean ``sys.argv``: the CLI gets its arguments from ``main(args)``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    return tmp_path
