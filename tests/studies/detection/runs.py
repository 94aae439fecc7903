"""A two-step DETR run through the study runner, shared by the detection study tests."""

from __future__ import annotations

from pathlib import Path

from attn_lightning.studies.detection.variants import CONFIGS
from attn_lightning.studies.runner import Runner

SMALL = ("model.init_args.net.d_model=32", "model.init_args.net.d_ff=32")
TINY = (
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "data.init_args.train_size=32",
    "data.init_args.val_size=16",
    "data.init_args.test_size=16",
    *SMALL,
)


def tiny_runner(experiment: str, runs_dir: Path) -> Runner:
    """A ``Runner`` of ``configs/detection/base.yaml`` for 2 steps of a small DETR on 32 scenes."""
    return Runner(
        configs=(str(CONFIGS / "base.yaml"),),
        overrides=TINY,
        experiment=experiment,
        runs_dir=runs_dir,
    )
