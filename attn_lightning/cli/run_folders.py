"""One run per folder: a fresh ``fit`` never writes into an existing run, a resumed run appends
to its TensorBoard run without a second point for the steps it replays, a checkpoint of a run
folder continues (fit) or is evaluated beside (validate/test/predict) that run, and each start of
a run saves its config beside the logs (once, while the settings stay the same).

Without this, a fresh ``fit --run_name X`` over an old ``X`` wrote ``last-v1.ckpt`` beside the old
``last.ckpt`` (so "resume from last.ckpt" restored the wrong run) and both runs' events went into
one TensorBoard folder. A folder without a checkpoint is not a run: a fit that stopped before its
first save (an error, Ctrl-C, ``kill -9``) leaves one, and retrying it starts afresh there.
And "resume with --ckpt_path checkpoints/exp/r/last.ckpt", followed without ``--run_name r``,
finished the run in a new ``version_0`` (checkpoints and TensorBoard split over two folders).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from attn_lightning.callbacks import is_partial
from attn_lightning.results.run_files import RUN_RECORD_FILES

log = logging.getLogger("attn_lightning")


class RunFolderError(ValueError):
    """A fresh fit aimed at a run folder that already holds a run, or checkpoints aimed at a
    folder that cannot hold them."""


def run_folders(config: Any) -> list[Path]:
    """The log and checkpoint folders a ``fit`` with ``run_name`` set will write (or [])."""
    run = config.get("run_name")
    if not run:
        return []  # version_N: the logger picks a new folder
    experiment = config.get("experiment") or "default"
    folders: list[Path] = []
    save_dir = _save_dir(config)
    if save_dir:  # TensorBoardLogger(save_dir, name=experiment, version=run)
        folders.append(save_dir / experiment / run)
    checkpoint = config.get("checkpoint", {})
    if checkpoint.get("dirpath"):
        folders.append(Path(str(checkpoint.get("dirpath"))))
    else:
        folders.append(Path(str(checkpoint.get("root") or "checkpoints")) / experiment / run)
    return folders


# ``--ckpt_path`` values Lightning resolves itself (no file path: no run folder to read).
NAMED_CHECKPOINTS = ("best", "last", "hpc", "registry")


def run_of_checkpoint(config: Any) -> tuple[str, str] | None:
    """``(experiment, run)`` of the run folder ``--ckpt_path`` lies in, or None.

    A checkpoint at ``<checkpoint root>/<experiment>/<run>/<file>.ckpt`` (``RunCheckpoint``'s
    layout), or one whose ``<experiment>/<run>`` is a log folder under the logger's
    ``save_dir``, belongs to that run; any other file (a copy elsewhere, an explicit
    ``checkpoint.dirpath``) to none.
    """
    ckpt = config.get("ckpt_path")
    if not ckpt or str(ckpt) in NAMED_CHECKPOINTS:
        return None
    run_dir = Path(str(ckpt)).parent
    experiment_dir = run_dir.parent
    if not run_dir.name or not experiment_dir.name or run_dir.name == "..":
        return None
    checkpoint = config.get("checkpoint") or {}
    root = Path(str(checkpoint.get("root") or "checkpoints"))
    in_root = os.path.realpath(experiment_dir.parent) == os.path.realpath(root)
    save_dir = _save_dir(config)
    logged = save_dir is not None and (save_dir / experiment_dir.name / run_dir.name).is_dir()
    return (experiment_dir.name, run_dir.name) if in_root or logged else None


def continue_run(config: Any, subcommand: str | None) -> tuple[str, str] | None:
    """Aim a run given a run folder's checkpoint at that run, unless ``--run_name`` names another.

    ``fit`` continues the run: its logs and checkpoints stay in ``<experiment>/<run>/``, so the
    resume hints (``--ckpt_path …/last.ckpt``) work as printed. ``validate``/``test``/``predict``
    log beside the run, in ``logs/<experiment>/<run>/<subcommand>/`` (a TensorBoard logger's
    ``sub_dir``), not in a new ``version_N`` nor in the fit's own event files, also when the
    run's name is given (a config's ``run_name``, as the LoRA configs set). Sets ``experiment``
    and ``run_name`` in ``config``.

    Returns:
        ``(experiment, run)`` when it did, else None.
    """
    found = run_of_checkpoint(config)
    if found is None or config.get("run_name") not in (None, found[1]):
        return None
    experiment, run = found
    if config.get("experiment") not in (None, experiment):
        log.info(
            "--ckpt_path %s is a checkpoint of run %s/%s: continuing there (not under "
            "experiment %s); give --run_name for another run folder",
            config.get("ckpt_path"),
            experiment,
            run,
            config.get("experiment"),
        )
    config["experiment"], config["run_name"] = experiment, run
    logger: Any = config.get("trainer", {}).get("logger")
    init_args: Any = logger.get("init_args") if hasattr(logger, "get") else None
    if subcommand != "fit" and hasattr(init_args, "get") and "sub_dir" in init_args:
        init_args["sub_dir"] = subcommand  # TensorBoardLogger: logs/<experiment>/<run>/<sub_dir>
    return found


def _save_dir(config: Any) -> Path | None:
    logger: Any = config.get("trainer", {}).get("logger")
    init_args: Any = logger.get("init_args") if hasattr(logger, "get") else None
    save_dir = init_args.get("save_dir") if hasattr(init_args, "get") else None
    return Path(str(save_dir)) if save_dir else None


def check_checkpoint_root(config: Any) -> None:
    """RunFolderError when a fit's checkpoint folder (``checkpoint.dirpath``, else
    ``checkpoint.root``) cannot be written, before anything is built or logged.

    Lightning finds out at the first save, after the training it was to keep (an 84-line chained
    traceback, a log folder left behind). Missing folders are created and a probe file written
    and removed; what the check created is removed again. Remote paths (``s3://``) are not
    checked. Only global rank 0 looks (as ``prepare_run_folder``).
    """
    if getattr(rank_zero_only, "rank", 0) > 0:
        return
    checkpoint = config.get("checkpoint") or {}
    option, folder = "checkpoint.dirpath", checkpoint.get("dirpath")
    if not folder:
        option, folder = "checkpoint.root", checkpoint.get("root") or "checkpoints"
    if "://" in str(folder):
        return
    problem = _unwritable(Path(str(folder)))
    if problem:
        raise RunFolderError(
            f"--{option} {str(folder)!r} cannot hold checkpoints: {problem}; give a folder this "
            f"user can write"
        )


def _unwritable(folder: Path) -> str | None:
    """Why checkpoints cannot be written into ``folder``, or None when they can."""
    created: list[Path] = []
    action = ""
    try:
        for path in reversed([folder, *folder.parents]):
            if path.is_dir():
                continue
            if path.exists():
                return f"{path} is a file, not a folder"
            action = f"creating {path}"
            path.mkdir()
            created.append(path)
        action = f"writing a file into {folder}"
        probe = folder / f".write-test.{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        return f"{action} failed ({e.strerror or e})"
    finally:
        for path in reversed(created):
            with contextlib.suppress(OSError):
                path.rmdir()
    return None


# What a fit writes into its run folders before its first checkpoint: TensorBoard events, the
# saved config(s), Lightning's hparams file, the run record, and a checkpoint being written when
# it stopped.
LOG_FILES = ("events.out.tfevents.*", "config.yaml", "config-*.yaml", "hparams.yaml")
ATTEMPT_FILES = LOG_FILES + RUN_RECORD_FILES


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
    """Save the run's config as ``config.yaml`` in its log dir; a resume (or a repeated evaluation)
    into a log dir that holds one saves it only if its settings differ from every saved config,
    as ``config-N.yaml``, instead of refusing to start as the stock callback does. Settings are
    compared without what names the run (``ckpt_path``, ``run_name``, ``experiment``, the logger's
    ``name``/``version``/``sub_dir``): a resume as the hint says writes no second file. Without a
    logger (``fast_dev_run``, ``logger: false``) nothing is saved: the stock callback would write
    into the working directory."""

    def setup(self, trainer: Any, pl_module: LightningModule, stage: str) -> None:
        if not trainer.loggers:
            return
        if not self.already_saved and self.save_to_log_dir:
            log_dir = Path(str(trainer.log_dir))  # a broadcast: every rank asks
            name = None
            if trainer.is_global_zero:
                name = config_name(log_dir, self.parser.dump(self.config, skip_none=False))
            name = trainer.strategy.broadcast(name)
            if name is None:  # these settings are saved in this log dir already
                self.already_saved = True
                return
            self.config_filename = name
        super().setup(trainer, pl_module, stage)


# What names a run rather than sets it up: equal configs differing only here are one config.
RUN_IDENTITY = ("ckpt_path", "run_name", "experiment")
LOGGER_IDENTITY = ("name", "version", "sub_dir")


def config_name(log_dir: Path, text: str) -> str | None:
    """The file name to save config ``text`` as in ``log_dir``, or None when a config saved there
    has the same settings (``RunConfigSaver``)."""
    settings = _settings(text)
    name, n = "config.yaml", 0
    while (log_dir / name).exists():
        try:
            if _settings((log_dir / name).read_text()) == settings:
                return None
        except (OSError, yaml.YAMLError):  # unreadable: not the same settings
            pass
        n += 1
        name = f"config-{n}.yaml"
    return name


def _settings(text: str) -> Any:
    data = yaml.safe_load(text)
    if not isinstance(data, dict):
        return data
    data = {k: v for k, v in data.items() if k not in RUN_IDENTITY}
    logger = (data.get("trainer") or {}).get("logger")
    if isinstance(logger, dict) and isinstance(logger.get("init_args"), dict):
        args = logger["init_args"]
        logger["init_args"] = {k: v for k, v in args.items() if k not in LOGGER_IDENTITY}
    return data
