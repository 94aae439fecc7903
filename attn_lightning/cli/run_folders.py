"""One run per folder: a fresh ``fit`` never writes into an existing run, a resumed run appends
to its TensorBoard run without a second point for the steps it replays, and each start of a run
saves its config beside the logs.

Without this, a fresh ``fit --run_name X`` over an old ``X`` wrote ``last-v1.ckpt`` beside the old
``last.ckpt`` (so "resume from last.ckpt" restored the wrong run) and both runs' events went into
one TensorBoard folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger


class RunFolderError(ValueError):
    """A fresh fit aimed at a run folder that already holds a run."""


def run_folders(config: Any) -> list[Path]:
    """The log and checkpoint folders a ``fit`` with ``run_name`` set will write (or [])."""
    run = config.get("run_name")
    if not run:
        return []  # version_N: the logger picks a new folder
    experiment = config.get("experiment") or "default"
    folders: list[Path] = []
    logger: Any = config.get("trainer", {}).get("logger")
    init_args: Any = logger.get("init_args") if hasattr(logger, "get") else None
    save_dir = init_args.get("save_dir") if hasattr(init_args, "get") else None
    if save_dir:  # TensorBoardLogger(save_dir, name=experiment, version=run)
        folders.append(Path(str(save_dir)) / experiment / run)
    checkpoint = config.get("checkpoint", {})
    if checkpoint.get("dirpath"):
        folders.append(Path(str(checkpoint.get("dirpath"))))
    else:
        folders.append(Path(str(checkpoint.get("root") or "checkpoints")) / experiment / run)
    return folders


def refuse_existing_run(config: Any) -> None:
    """RunFolderError when a fresh fit (no ``ckpt_path``) would write into a non-empty run folder.

    Names the folder and both ways out: resume it, or choose a new ``--run_name``.
    """
    if config.get("ckpt_path"):
        return
    for folder in run_folders(config):
        if folder.is_dir() and any(folder.iterdir()):
            last = next(iter(sorted(folder.rglob("last.ckpt"))), None)
            resume = f"--ckpt_path {last}" if last else "--ckpt_path <its last.ckpt>"
            raise RunFolderError(
                f"run folder {str(folder)!r} already holds a run; resume it with {resume} "
                f"--run_name {config.get('run_name')}, or start a new one with another --run_name"
            )


def purge_replayed_steps(logger: Any, step: int) -> None:
    """Make a resumed TensorBoard run drop its events logged after ``step``.

    ``SummaryWriter(purge_step=step)`` discards the events of steps ≥ ``step`` that the
    interrupted run wrote after its last checkpoint, which the resumed run logs again. The
    logger creates its writer lazily from ``_kwargs``, so this must run before the first log.
    """
    if isinstance(logger, TensorBoardLogger) and step > 0:
        logger._kwargs["purge_step"] = step


class RunConfigSaver(SaveConfigCallback):
    """Save the run's config as ``config.yaml``, or ``config-N.yaml`` when the log dir is reused
    (resume into the same ``run_name``), instead of refusing to start as the stock callback does.
    Without a logger (``fast_dev_run``, ``logger: false``) nothing is saved: the stock callback
    would write into the working directory."""

    def setup(self, trainer: Any, pl_module: LightningModule, stage: str) -> None:
        if not trainer.loggers:
            return
        if not self.already_saved and self.save_to_log_dir:
            log_dir = Path(str(trainer.log_dir))
            name = None
            if trainer.is_global_zero:
                name, n = "config.yaml", 0
                while (log_dir / name).exists():
                    n += 1
                    name = f"config-{n}.yaml"
            self.config_filename = trainer.strategy.broadcast(name)
        super().setup(trainer, pl_module, stage)
