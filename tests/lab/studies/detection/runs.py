"""A two-step DETR run through the study runner, and a finished run's record written by hand,
shared by the detection study tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attn_lightning.records.run_files import write_curves, write_record
from lab.studies.detection.variants import CONFIGS
from lab.studies.runner import Runner, Variant, run_name

SMALL = ("model.init_args.net.d_model=32", "model.init_args.net.d_ff=32")
TINY = (
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "data.init_args.train_size=32",
    "data.init_args.val_size=16",
    "data.init_args.test_size=16",
    *SMALL,
)


def tiny_runner(experiment: str) -> Runner:
    """A ``Runner`` of ``configs/detection/base.yaml`` for 2 steps of a small DETR on 32 scenes."""
    return Runner(
        configs=(str(CONFIGS / "base.yaml"),),
        overrides=TINY,
        experiment=experiment,
    )


def fake_record(
    root: Path,
    experiment: str,
    variant: str,
    seed: int,
    *,
    test: dict[str, float],
    fit: dict[str, float] | None = None,
    seconds: float = 100.0,
    steps: int = 500,
    curve: dict[int, float] | None = None,
    study: str | None = None,
    environment: dict[str, Any] | None = None,
) -> Path:
    """A finished run's record folder ``<root>/<experiment>/<variant>-s<seed>/`` as ``train.py``
    leaves it (record.json and curves.csv, ``val/mAP`` at the steps of ``curve``); its ``study``
    tag is ``study`` (default the experiment, as the runner's)."""
    name = run_name(Variant(variant), seed)
    folder = root / experiment / name
    folder.mkdir(parents=True)
    write_record(
        folder,
        {
            "schema": 1,
            "experiment": experiment,
            "run": name,
            "seed": seed,
            "tags": {"study": study or experiment, "variant": variant, "seed": seed},
            "status": "ok",
            "subcommand": "fit",
            "fit_seconds": seconds,
            "global_step": steps,
            "metrics": {"fit": fit or {}, "test": test},
            "environment": environment,
        },
    )
    write_curves(folder, {(step, "val/mAP"): value for step, value in (curve or {}).items()})
    return folder
