"""``--debug``'s NaN/inf check lasts for its own run only when the CLI runs in-process."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attn_lightning.attention import set_check_finite
from attn_lightning.attention.base import CHECK_FINITE_ENV, check_finite_enabled
from attn_lightning.cli import main
from attn_lightning.cli.debug import debug_checks, enable_debug_checks
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
