"""Fixtures shared across the test folders."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from lab.benchmarks.gpu_report import FAILURES_AT_ONCE
from tests.elsewhere import pass_for_another_machine


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist each worker gets its share of the CPUs for torch: two workers with
    torch's default (every CPU) each would oversubscribe the cores they share."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if workers.isdigit() and int(workers) > 1:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(workers)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``FAILURES_AT_ONCE=1`` in the environment (``lab.benchmarks.gpu_report`` sets it),
    print each failure's message when it happens: a test stage killed at its timeout never
    reaches pytest's final summary, and a device lease may not come twice."""
    if report.failed and os.environ.get(FAILURES_AT_ONCE) == "1":
        tail = report.longreprtext.strip().splitlines()[-12:]
        sys.__stderr__.write(f"\nFAILED NOW {report.nodeid} ({report.when}):\n")
        sys.__stderr__.write("\n".join(tail) + "\n")
        sys.__stderr__.flush()


@pytest.fixture
def cli_workdir(tmp_path, monkeypatch):
    """Run ``train.py``'s CLI in a fresh folder (its logs/ and checkpoints/ land there), with a
    clean ``sys.argv``: the CLI gets its arguments from ``main(args)``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["train.py"])
    return tmp_path


@pytest.fixture
def elsewhere(monkeypatch):
    """This process passes for another machine (``tests.elsewhere``): a page rebuilt from run
    records must state where the runs ran, never where it is rebuilt."""
    pass_for_another_machine(monkeypatch)
