"""One run per folder: a fresh ``fit`` never writes into an existing run, a resumed run appends
to its TensorBoard run without a second point for the steps it replays, a checkpoint of a run
folder continues (fit) or is evaluated beside (validate/test/predict) that run, and each start of
a run saves its config beside the logs (once, while the settings stay the same).

So "resume from last.ckpt" never finds another run's ``last-v1.ckpt`` beside its own (a fresh
fit's folders are checked in ``fresh_runs``), a resume given only ``--ckpt_path`` stays in its
run's folder instead of a new ``version_0``, and ``--ckpt_path last`` (which Lightning resolves
from a callback that has saved nothing yet) resumes the run instead of starting it from step 0.

``--experiment`` and ``--run_name`` name one folder each, never paths: a path put a run's folders
elsewhere (``../../x`` or ``/abs/x`` outside ``logs/`` and ``checkpoints/``, ``a/b`` inside another
run's folder) and ``--run_name ""`` silently became ``version_N``. So a name may not be empty,
``.`` or ``..``, or hold ``/`` or ``\\`` (a run folder copied to Windows keeps its meaning).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import yaml
from lightning.pytorch import LightningModule
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import TensorBoardLogger

from attn_lightning.cli.checkpoints import CheckpointError

log = logging.getLogger("attn_lightning")


class RunFolderError(ValueError):
    """A fresh fit aimed at a run folder that already holds a run or files it did not write, or
    a run aimed at a folder that cannot hold its logs or checkpoints."""


def run_folders(config: Any) -> list[Path]:
    """The log and checkpoint folders a ``fit`` with ``run_name`` set will write (or []), each
    once (a ``checkpoint.dirpath`` may be the log folder)."""
    run = config.get("run_name")
    if not run:
        return []  # version_N: the logger picks a new folder
    logs = log_folder(config)
    folders = [logs[1]] if logs else []  # TensorBoardLogger(save_dir, name=experiment, version=run)
    return list(dict.fromkeys([*folders, checkpoint_folder(config)]))


def log_folder(config: Any) -> tuple[str, Path] | None:
    """``(save_dir, folder)``: the logger's ``save_dir`` and the folder the run logs into
    (``<save_dir>/<experiment>/<run>``, or ``<save_dir>/<experiment>`` for a ``version_N``), or
    None without a logger that has a ``save_dir``."""
    save_dir = _save_dir(config)
    if save_dir is None:
        return None
    folder = save_dir / (config.get("experiment") or "default")
    run = config.get("run_name")
    return str(save_dir), folder / str(run) if run else folder


def checkpoint_folder(config: Any) -> Path:
    """``checkpoint.dirpath``, else ``<checkpoint.root>/<experiment>/<run_name>`` (with a run
    name: ``RunCheckpoint``'s folder, with or without a logger)."""
    checkpoint = config.get("checkpoint") or {}
    if checkpoint.get("dirpath"):
        return Path(str(checkpoint.get("dirpath")))
    root = Path(str(checkpoint.get("root") or "checkpoints"))
    return root / (config.get("experiment") or "default") / str(config.get("run_name"))


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


def resolve_named_checkpoint(config: Any, subcommand: str | None) -> None:
    """``--ckpt_path last`` and ``best`` as the run's own file (a path, checked as any other).

    Lightning looks for "last" in the folder of a checkpoint callback that has not been set up
    yet, finds none, and a fit starts from step 0 inside the run it was to resume; "best" it
    knows only after a fit in the same process. ``last`` (any subcommand) takes ``<checkpoint
    folder>/last.ckpt`` of ``--run_name`` (or of ``checkpoint.dirpath``); ``best`` (an
    evaluation: a fit resumes where it stopped, not from an earlier step) the run's one
    ``best*.ckpt``. An evaluation then logs beside that run, as with the file's path.

    Raises:
        CheckpointError: no run named, the run has no such file, or (best) several.
    """
    name = config.get("ckpt_path")
    if name not in ("last", "best"):
        return
    if name == "best" and subcommand == "fit":
        raise CheckpointError(
            "--ckpt_path best: fit resumes a run from its last.ckpt (--ckpt_path last), not from "
            "an earlier step; best is for validate, test and predict"
        )
    dirpath = (config.get("checkpoint") or {}).get("dirpath")
    pattern = "last.ckpt" if name == "last" else "best*.ckpt"
    if not config.get("run_name") and not dirpath:
        raise CheckpointError(
            f"--ckpt_path {name} needs the run whose {pattern} to use: add --run_name <run>, or "
            f"give the file (--ckpt_path checkpoints/<experiment>/<run>/{pattern})"
        )
    folder = checkpoint_folder(config)
    found = sorted(folder.glob(pattern))
    if not found:
        raise CheckpointError(
            f"--ckpt_path {name}: there is no {folder / pattern} to resume or evaluate; check "
            f"--run_name and --experiment, or give the checkpoint's path"
        )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise CheckpointError(
            f"--ckpt_path best: {folder} holds {len(found)} best checkpoints ({names}); give "
            f"the one to use as --ckpt_path {folder}/<file>"
        )
    config["ckpt_path"] = str(found[0])
    if subcommand != "fit" and not dirpath:
        config["run_name"] = None  # evaluated beside its run (continue_run), as its path is


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


NAMES = ("experiment", "run_name")
SEPARATORS = ("/", "\\")
RULE = "names one folder under logs/ and checkpoints/: not empty, not '.' or '..', no '/' or '\\'"


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a run or experiment name, or None when it is one."""
    if value.strip() == "":
        return "is empty"
    if value in (".", ".."):
        return f"is {value!r}, which names no folder of its own"
    separator = next((s for s in SEPARATORS if s in value), None)
    if separator is not None:
        return f"holds {separator!r}, a path separator"
    return None


def check_names(config: Any) -> str | None:
    """The one-line error for the first of ``--experiment``/``--run_name`` that is not a name,
    or None (an option left unset is fine: ``default`` and ``version_N``)."""
    for option in NAMES:
        value = config.get(option)
        if value is None:
            continue
        problem = name_problem(str(value))
        if problem:
            what = "a run name" if option == "run_name" else "an experiment name"
            return (
                f"--{option} {str(value)!r} {problem}; {what} {RULE} "
                f"(e.g. --{option} {_example(str(value))})"
            )
    return None


def _example(value: str) -> str:
    """A name close to ``value``: its path's parts joined by '-' (``a/b`` -> ``a-b``)."""
    parts = [p for p in value.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return "-".join(parts) or "my-run"
