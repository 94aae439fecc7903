"""The folders a run writes, checked before anything is built (every subcommand with a logger,
and a fit's checkpoint folder), and a fresh ``fit``'s run folders: refused when they hold a run,
cleared when they hold what a stopped attempt of this project wrote, and made with a mark that
says so.

An unwritable folder is one line naming the option, the folder and why (exit 2): Lightning found
an unwritable checkpoint folder at the first save, after the training it was to keep, and an
unwritable ``logs/`` ended in a 36-line ``PermissionError`` traceback from TensorBoard's writer.

A folder without a checkpoint is not a run: a fit that stopped before its first save (an error,
Ctrl-C, ``kill -9``) leaves one, and retrying it starts afresh there. A user's own
``config.yaml`` or ``record.json`` in a folder a fit is pointed at must survive that, so a fit
marks the log folder it creates (``MARKER``), only files a fit writes are ever removed, only from
a marked folder, and each one removed is named. (A
checkpoint folder of its own needs no mark: a fit writes nothing there before its first
checkpoint but that checkpoint's temporary file, whose name is this project's alone; and a
marked one would set off Lightning's "Checkpoint directory exists and is not empty".)
"""

from __future__ import annotations

import contextlib
import logging
import os
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_only

from attn_lightning.callbacks import is_partial
from attn_lightning.cli.run_folders import RunFolderError, log_folder, run_folders
from attn_lightning.records.run_files import RUN_RECORD_FILES


def check_writable_folders(config: Any, subcommand: str | None) -> None:
    """RunFolderError when a folder the run will write cannot be written, before anything is
    built or logged: a fit's checkpoint folder (``checkpoint.dirpath``, else ``checkpoint.root``)
    and the logger's folder (``trainer.logger.init_args.save_dir``).

    Missing folders are created and a probe file written and removed; what the check created is
    removed again. Remote paths (``s3://``) are not checked. Only global rank 0 looks (as
    ``prepare_run_folder``).
    """
    if getattr(rank_zero_only, "rank", 0) > 0:
        return
    checks: list[tuple[str, Any, Path, str]] = []
    if subcommand == "fit":
        checkpoint = config.get("checkpoint") or {}
        option, value = "checkpoint.dirpath", checkpoint.get("dirpath")
        if not value:
            option, value = "checkpoint.root", checkpoint.get("root") or "checkpoints"
        checks.append((option, value, Path(str(value)), "checkpoints"))
    logs = log_folder(config)
    if logs is not None:
        checks.append(("trainer.logger.init_args.save_dir", logs[0], logs[1], "logs"))
    for option, value, folder, what in checks:
        if "://" in str(value):
            continue
        problem = _unwritable(folder)
        if problem:
            raise RunFolderError(
                f"--{option} {str(value)!r} cannot hold {what}: {problem}; give a folder this "
                f"user can write"
            )


def _unwritable(folder: Path, attempts: int = 3) -> str | None:
    """Why files cannot be written into ``folder``, or None when they can.

    Two runs started together (a sweep, a resume test) probe the same folder at once: a folder
    the other made between our look and our ``mkdir``, or one it removed again under our probe,
    is not a reason to refuse, so those races are retried.
    """
    created: list[Path] = []
    action = ""
    try:
        for _ in range(attempts):
            try:
                for path in reversed([folder, *folder.parents]):
                    if path.is_dir():
                        continue
                    if path.exists():
                        return f"{path} is a file, not a folder"
                    action = f"creating {path}"
                    try:
                        path.mkdir()
                    except FileExistsError:
                        if path.is_dir():  # another process made it just now
                            continue
                        raise
                    created.append(path)
                action = f"writing a file into {folder}"
                probe = folder / f".write-test.{os.getpid()}"
                probe.write_bytes(b"")
                probe.unlink()
                return None
            except FileNotFoundError as e:  # another probe removed a folder it had made
                last: OSError = e
        return f"{action} failed ({last.strerror or last})"
    except OSError as e:
        return f"{action} failed ({e.strerror or e})"
    finally:
        for path in reversed(created):
            with contextlib.suppress(OSError):
                path.rmdir()


log = logging.getLogger("attn_lightning")

MARKER = ".attn_lightning_run"
MARKER_TEXT = (
    "This folder was made by attn-lightning's train.py fit for one run. While it holds no "
    "checkpoint, a retry of that fit removes the files a fit writes here (TensorBoard events, "
    "config*.yaml, hparams.yaml, the run record) and nothing else.\n"
)
# What a fit writes into its run folders before its first checkpoint: TensorBoard events, the
# saved config(s), Lightning's hparams file, the run record, and a checkpoint being written when
# it stopped (``is_partial``).
LOG_FILES = ("events.out.tfevents.*", "config.yaml", "config-*.yaml", "hparams.yaml")
ATTEMPT_FILES = LOG_FILES + RUN_RECORD_FILES


def prepare_run_folder(config: Any) -> list[Path]:
    """Check the run folders of a fresh fit (no ``ckpt_path``) before anything is written.

    A folder that holds a checkpoint holds a run: RunFolderError names it and both ways out
    (resume it, or another ``--run_name``). A folder this project made (``MARKER``) that holds
    only what a stopped attempt writes is cleared, each file named in the log (a checkpoint's
    temporary file is cleared from any folder). Any other file, or any file in a folder no fit
    made, is the user's: RunFolderError names it, and nothing is removed. A log folder that does
    not exist yet is made, with the marker. Only global rank 0 looks: DDP's other processes
    start after it and find the folders as rank 0 left them.

    Returns:
        The folders made (parents included), for ``discard_unused``.

    Raises:
        RunFolderError: a folder holds a checkpoint, or files that are not a stopped fit's.
    """
    if config.get("ckpt_path") or getattr(rank_zero_only, "rank", 0) > 0:
        return []
    if not config.get("run_name"):
        return []  # version_N: the logger picks a new folder
    folders = run_folders(config)
    held = [f for f in folders if f.is_dir() and any(f.iterdir())]
    checkpoints = sorted(
        (p for f in held for p in f.glob("*.ckpt") if not is_partial(p)),  # where they are saved
        key=lambda p: p.stat().st_mtime,
    )
    run = config.get("run_name")
    if checkpoints:
        last = next((p for p in reversed(checkpoints) if p.name == "last.ckpt"), checkpoints[-1])
        raise RunFolderError(
            f"run folder {str(last.parent)!r} already holds a run; resume it with --ckpt_path "
            f"{last} --run_name {run}, or start a new one with another --run_name"
        )
    attempts = {folder: _attempt(folder) for folder in held}  # all checked before any removal
    for folder, attempt in attempts.items():
        for path in attempt:
            path.unlink(missing_ok=True)
        if attempt:
            log.info(
                "run folder %s held no checkpoint (a fit stopped before its first save): "
                "starting it afresh, removed %s",
                folder,
                _names(attempt),
            )
    made: list[Path] = []
    logs = log_folder(config)
    if logs is not None and not logs[1].exists():
        made = _make_run_folder(logs[1], run)
        (logs[1] / MARKER).write_text(MARKER_TEXT)
    return made


def _make_run_folder(folder: Path, run: str, attempts: int = 5) -> list[Path]:
    """Make ``folder`` and its missing parents; return the ones made here.

    Runs started together (a sweep, a resume test) share the parents: one another run made
    between our look and our ``mkdir`` is used, not made; one it removed again under us (its
    writability probe cleaning up, ``_unwritable``) is made again. ``folder`` itself is the run's:
    another run making it at the same moment stops this one (RunFolderError).
    """
    made: list[Path] = []
    for attempt in range(attempts):
        try:
            for path in [*reversed(folder.parents), folder]:
                if path != folder and path.is_dir():
                    continue
                try:
                    path.mkdir()
                except FileExistsError:
                    if path != folder:
                        continue  # made meanwhile by a run started beside this one: shared
                    raise RunFolderError(
                        f"run folder {str(folder)!r} was made by another run starting at the "
                        f"same time under --run_name {run}: start this one with another "
                        f"--run_name"
                    ) from None
                made.append(path)
            return made
        except FileNotFoundError:  # a parent removed under us: look again
            if attempt == attempts - 1:
                raise
    return made


def _attempt(folder: Path) -> list[Path]:
    """What a stopped fit wrote into ``folder``: its files if the folder is one a fit made
    (``MARKER``), and a checkpoint's temporary files; RunFolderError for anything else."""
    partial = [p for p in folder.iterdir() if is_partial(p)]
    files = sorted(p for p in folder.iterdir() if p.name != MARKER and p not in partial)
    attempt = [p for p in files if any(fnmatch(p.name, f) for f in ATTEMPT_FILES)]
    other = [p for p in files if p not in attempt]
    if files and not (folder / MARKER).is_file():
        raise RunFolderError(
            f"run folder {str(folder)!r} holds no checkpoint but files of a folder no fit made "
            f"({_names(files)}; a fit marks its folders with {MARKER}): nothing was removed; "
            f"point the run elsewhere (another --run_name or --checkpoint.dirpath), or delete "
            f"these files yourself if a stopped run left them"
        )
    if other:
        raise RunFolderError(
            f"run folder {str(folder)!r} holds no checkpoint but files a fit does not write "
            f"({_names(other)}): nothing was removed; delete them or start the run with "
            f"another --run_name"
        )
    return attempt + partial


def _names(paths: list[Path], most: int = 8) -> str:
    names = [p.name for p in paths]
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + more


def discard_unused(made: list[Path]) -> None:
    """Remove the folders ``prepare_run_folder`` made if nothing but its marker is in them: the
    run stopped before it started (a configuration error while building the model or data)."""
    for path in reversed(made):
        with contextlib.suppress(OSError):
            if {p.name for p in path.iterdir()} <= {MARKER}:
                (path / MARKER).unlink(missing_ok=True)
                path.rmdir()
