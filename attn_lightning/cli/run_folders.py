"""One run per folder: a fresh ``fit`` never writes into an existing run, a resumed run appends
to its TensorBoard run without a second point for the steps it replays, and each start of a run
saves its config beside the logs.

Without this, a fresh ``fit --run_name X`` over an old ``X`` wrote ``last-v1.ckpt`` beside the old
``last.ckpt`` (so "resume from last.ckpt" restored the wrong run) and both runs' events went into
one TensorBoard folder. A folder without a checkpoint is not a run: a fit that stopped before its
first save (an error, Ctrl-C, ``kill -9``) leaves one, and retrying it starts afresh there.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from lightning.pytorch import LightningModule
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from attn_lightning.callbacks import is_partial

log = logging.getLogger("attn_lightning")


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


# What a fit writes into its run folders before its first checkpoint: TensorBoard events, the
# saved config(s), Lightning's hparams file, and a checkpoint being written when it stopped.
ATTEMPT_FILES = ("events.out.tfevents.*", "config.yaml", "config-*.yaml", "hparams.yaml")


def prepare_run_folder(config: Any) -> list[Path]:
    """Check the run folders of a fresh fit (no ``ckpt_path``) before anything is written.

    A folder that holds a checkpoint holds a run: RunFolderError names it and both ways out
    (resume it, or another ``--run_name``). A folder without one is what a fit that stopped
    before its first save left (an error, Ctrl-C, ``kill -9``): nothing there can be resumed, so
    its files are removed and the fit starts afresh in it; any file such a fit does not write
    is the user's, and RunFolderError names it and the folder to delete instead. Only global
    rank 0 looks: DDP's other processes start after it and find the folder as rank 0 left it.

    Returns:
        The files removed (empty when the folders were new or empty).

    Raises:
        RunFolderError: a folder holds a checkpoint, or files a fit does not write.
    """
    if config.get("ckpt_path") or getattr(rank_zero_only, "rank", 0) > 0:
        return []
    folders = [f for f in run_folders(config) if f.is_dir() and any(f.iterdir())]
    checkpoints = sorted(
        (p for f in folders for p in f.rglob("*.ckpt") if not is_partial(p)),
        key=lambda p: p.stat().st_mtime,
    )
    run = config.get("run_name")
    if checkpoints:
        last = next((p for p in reversed(checkpoints) if p.name == "last.ckpt"), checkpoints[-1])
        raise RunFolderError(
            f"run folder {str(last.parent)!r} already holds a run; resume it with --ckpt_path "
            f"{last} --run_name {run}, or start a new one with another --run_name"
        )
    attempt = [p for f in folders for pattern in ATTEMPT_FILES for p in f.glob(pattern)]
    attempt += [p for f in folders for p in f.iterdir() if is_partial(p)]
    other = [p for f in folders for p in f.iterdir() if p not in attempt]
    if other:
        raise RunFolderError(
            f"run folder {str(other[0].parent)!r} holds no checkpoint but files a fit does not "
            f"write ({', '.join(sorted(p.name for p in other))}); delete it "
            f"(rm -r {other[0].parent}) or start the run with another --run_name"
        )
    for path in attempt:
        path.unlink()
    if attempt:
        log.info(
            "run folder %s held no checkpoint (a fit stopped before its first save): starting it "
            "afresh, removed %s",
            ", ".join(str(f) for f in folders),
            ", ".join(sorted(p.name for p in attempt)),
        )
    return attempt


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
