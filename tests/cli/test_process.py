"""What a CLI call sets for its process: ``--debug``'s NaN/inf check lasts for its own run only
when the CLI runs in-process; Lightning's lines that say nothing about a run are gone (absent
accelerators, the own folder of a resume, a FitClock state on evaluation), those that do stay."""

from __future__ import annotations

import logging
import os
import warnings
from pathlib import Path

import pytest

from attn_lightning.attention import set_check_finite
from attn_lightning.attention.base import CHECK_FINITE_ENV, check_finite_enabled
from attn_lightning.cli import main
from attn_lightning.cli.process import (
    RANK_ZERO_LOGGER,
    debug_checks,
    enable_debug_checks,
    quiet,
    quiet_own_resume,
)
from tests.cli.one_line import BASE, TINY


@pytest.fixture
def check_off(monkeypatch: pytest.MonkeyPatch):
    """The check off and its variable unset, whatever the process had; restored after."""
    monkeypatch.delenv(CHECK_FINITE_ENV, raising=False)
    before = check_finite_enabled()
    set_check_finite(False)
    yield
    set_check_finite(before)


def test_debug_checks_restores_switch_and_variable(check_off: None) -> None:
    with debug_checks(True):
        assert check_finite_enabled() and os.environ[CHECK_FINITE_ENV] == "1"
    assert not check_finite_enabled() and CHECK_FINITE_ENV not in os.environ


def test_debug_checks_keeps_a_variable_set_before(
    check_off: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CHECK_FINITE_ENV, "0")
    with debug_checks(True):
        assert os.environ[CHECK_FINITE_ENV] == "1"
    assert os.environ[CHECK_FINITE_ENV] == "0"


def test_debug_checks_off_changes_nothing(check_off: None) -> None:
    with debug_checks(False):
        assert not check_finite_enabled() and CHECK_FINITE_ENV not in os.environ


def test_in_process_debug_fit_leaves_the_check_off(
    check_off: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    seen: list[bool] = []
    from attn_lightning.cli import app

    build = app.AttnLightningCLI

    def spy(*args, **kwargs):  # the switch as the run sees it
        seen.append(check_finite_enabled())
        return build(*args, **kwargs)

    monkeypatch.setattr(app, "AttnLightningCLI", spy)
    main(["fit", *BASE, *TINY, "--trainer.max_steps=2", "--debug=true"])
    assert seen == [True]
    assert not check_finite_enabled() and CHECK_FINITE_ENV not in os.environ


def test_debug_without_run_keeps_the_check_on(check_off: None) -> None:
    main([*BASE, *TINY, "--debug=true"], run=False)
    try:
        assert check_finite_enabled()
    finally:
        set_check_finite(False)
        os.environ.pop(CHECK_FINITE_ENV, None)


def test_enable_debug_checks_sets_both(check_off: None) -> None:
    enable_debug_checks()
    try:
        assert check_finite_enabled() and os.environ[CHECK_FINITE_ENV] == "1"
    finally:
        set_check_finite(False)
        os.environ.pop(CHECK_FINITE_ENV, None)


QUIET_RUN = [
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=32",
    "--data.init_args.test_size=32",
    "--data.init_args.batch_size=8",
    "--trainer.val_check_interval=4",
    "--trainer.limit_val_batches=1",
    "--trainer.limit_test_batches=1",
    "--trainer.limit_predict_batches=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--experiment=exp",
]
MISSING_CALLBACK = "Please add the following callbacks"
NOT_EMPTY = "exists and is not empty"

pytestmark = pytest.mark.usefixtures("cli_workdir")


def _run(subcommand: str, *extra: str):
    return main([subcommand, *BASE, *QUIET_RUN, *extra])


def _messages(record: list[warnings.WarningMessage], text: str) -> list[str]:
    return [str(w.message) for w in record if text in str(w.message)]


class _Lines(logging.Handler):
    """The records a logger lets through its filters."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _passes(message: str) -> bool:
    logger = logging.getLogger(RANK_ZERO_LOGGER)
    record = logger.makeRecord(RANK_ZERO_LOGGER, logging.INFO, __file__, 1, message, None, None)
    return bool(logger.filter(record))


def test_lines_about_absent_accelerators_are_dropped_the_others_kept():
    quiet()
    assert not _passes("GPU available: False, used: False")
    assert not _passes("TPU available: False, using: 0 TPU cores")
    assert not _passes("HPU available: False, using: 0 HPUs")
    assert not _passes("💡 Tip: For seamless cloud logging, try installing [litlogger]")
    # An accelerator that is there: where the run trains, or that it leaves idle.
    assert _passes("GPU available: True (cuda), used: True")
    assert _passes("GPU available: True (cuda), used: False")
    assert _passes("TPU available: True, using: 0 TPU cores")
    assert _passes("`Trainer.fit` stopped: `max_steps=4` reached.")


def test_a_run_prints_no_absent_accelerator_line():
    lines = _Lines()
    logger = logging.getLogger(RANK_ZERO_LOGGER)
    # The study CLIs, run in-process by other tests, quiet "lightning" to WARNING: Lightning's
    # info lines must reach this handler whatever ran before.
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(lines)
    try:
        _run("fit", "--run_name=r", "--trainer.max_steps=4", "--trainer.accelerator=cpu")
    finally:
        logger.removeHandler(lines)
        logger.setLevel(level)
    assert not [line for line in lines.lines if "available: False" in line], lines.lines
    assert any("`Trainer.fit` stopped" in line for line in lines.lines), lines.lines


@pytest.mark.parametrize("subcommand", ["validate", "test", "predict"])
def test_evaluating_a_checkpoint_asks_for_no_fit_clock(subcommand, tmp_path):
    _run("fit", "--run_name=r", "--trainer.max_steps=4")
    last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _run(subcommand, f"--ckpt_path={last}")
    assert not _messages(record, MISSING_CALLBACK)


def test_resuming_into_the_runs_own_folder_does_not_warn_it_is_not_empty(tmp_path):
    _run("fit", "--run_name=r", "--trainer.max_steps=4")
    last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        cli = _run(
            "fit",
            f"--ckpt_path={last}",
            "--run_name=r",
            "--trainer.max_steps=6",
            "--trainer.max_epochs=3",
        )
    assert cli.trainer.global_step == 6
    assert not _messages(record, NOT_EMPTY)
    assert not _messages(record, MISSING_CALLBACK)


def test_only_the_checkpoints_own_folder_is_silenced(tmp_path):
    own = tmp_path / "checkpoints" / "exp" / "r"
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        quiet_own_resume(own / "last.ckpt")
        quiet_own_resume("last")  # Lightning's own name: nothing to compare
        for spelling in (own, os.path.relpath(own), os.path.realpath(own)):
            warnings.warn(f"Checkpoint directory {spelling} exists and is not empty.", stacklevel=1)
        other = tmp_path / "checkpoints" / "exp" / "r2"
        warnings.warn(f"Checkpoint directory {other} exists and is not empty.", stacklevel=1)
        prefix = tmp_path / "checkpoints" / "exp" / "r-old"  # the own folder's name + more
        warnings.warn(f"Checkpoint directory {prefix} exists and is not empty.", stacklevel=1)
    assert _messages(record, NOT_EMPTY) == [
        f"Checkpoint directory {other} exists and is not empty.",
        f"Checkpoint directory {prefix} exists and is not empty.",
    ]
