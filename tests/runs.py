"""Helpers of the tests that run ``train.py``'s CLI in-process from the real configs."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from attn_lightning.attention import available_attentions
from attn_lightning.cli import main

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
DEBUG = CONFIGS / "presets" / "debug.yaml"


def train(
    subcommand: str,
    tmp: Path,
    configs: Sequence[Path],
    *,
    options: Sequence[str] = (),
    extra: Sequence[str] = (),
) -> Any:
    """``train.py <subcommand> --config ...`` with logs and checkpoints under ``tmp``."""
    args = [subcommand]
    for config in configs:
        args += ["--config", str(config)]
    args += [
        *options,
        f"--trainer.logger.init_args.save_dir={tmp / 'logs'}",
        f"--checkpoint.root={tmp / 'checkpoints'}",
        *extra,
    ]
    return main(args)


# One training step, one validation and the test split (``fit --test_after_fit``).
SMOKE = ("--trainer.fast_dev_run=true", "--test_after_fit=true")


def smoke_fit(run: Callable[..., Any], config: Path, tmp: Path) -> Any:
    """``run("fit", tmp, config, DEBUG, extra=SMOKE)`` for one backend overlay (skipped when its
    backend is not registered); the CLI object."""
    skip_unregistered(config)
    return run("fit", tmp, config, DEBUG, extra=SMOKE)


def skip_unregistered(config: Path) -> None:
    """Skip a test of a backend overlay whose backend is not registered."""
    init = (yaml.safe_load(config.read_text()).get("model") or {}).get("init_args") or {}
    name = (init.get("attention") or {}).get("name")
    if name is not None and name not in available_attentions():
        pytest.skip(f"backend of {config.name} is not registered")


def ddp_env() -> dict[str, str]:
    """This environment without the variables of a distributed launch or of a set seed."""
    launch = (
        "PL_",
        "LOCAL_RANK",
        "NODE_RANK",
        "WORLD_SIZE",
        "MASTER_",
        "RANK",
        "SLURM_",
        "TORCHELASTIC",
        "GROUP_RANK",
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(launch)}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
