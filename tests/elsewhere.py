"""Pass for another machine: a page rebuilt from run records states where the runs ran, never
where it is rebuilt; tests rebuild the committed pages under this to prove it."""

from __future__ import annotations

import platform

import pytest

# What ``platform`` answers on the pretended machine (no real one answers this).
ANSWERS = {
    "platform": "Elsewhere-0.0-test",
    "processor": "elsewhere-cpu",
    "machine": "elsewhere-cpu",
    "python_version": "0.0.0",
}


def pass_for_another_machine(patch: pytest.MonkeyPatch) -> None:
    """Make ``platform`` describe another machine until ``patch`` is undone."""
    for name, value in ANSWERS.items():
        patch.setattr(platform, name, lambda *_, value=value, **__: value)
