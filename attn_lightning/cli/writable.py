"""The folders a run writes, checked before anything is built: its checkpoint folder (``fit``)
and its log folder (every subcommand with a logger).

Lightning finds an unwritable checkpoint folder at the first save, after the training it was to
keep (an 84-line chained traceback, a log folder left behind), and an unwritable ``logs/`` ended
every subcommand in a 36-line ``PermissionError`` traceback from TensorBoard's writer (exit 1).
Here either is one line naming the option, the folder and why (exit 2).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any

from lightning.pytorch.utilities.rank_zero import rank_zero_only

from attn_lightning.cli.run_folders import RunFolderError, log_folder


def check_writable_folders(config: Any, subcommand: str | None) -> None:
    """RunFolderError when a folder the run will write cannot be written, before anything is
    built or logged: a fit's checkpoint folder (``checkpoint.dirpath``, else ``checkpoint.root``)
    and the logger's folder (``trainer.logger.init_args.save_dir``).

    Missing folders are created and a probe file written and removed; what the check created is
    removed again. Remote paths (``s3://``) are not checked. Only global rank 0 looks (as
    ``run_folders.prepare_run_folder``).
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
