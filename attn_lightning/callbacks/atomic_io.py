"""Atomic checkpoint writes: a checkpoint is written to a temporary file beside its target,
flushed to the disk and renamed over it, so a kill leaves either the old file or the new one,
never a truncated one; a write that fails removes its temporary file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol

PARTIAL = ".partial"  # a checkpoint being written: ``.<name>.<pid>.partial`` beside it


def is_partial(path: Path) -> bool:
    """Whether ``path`` is the temporary file of a checkpoint write (finished or cut short)."""
    return path.name.startswith(".") and path.name.endswith(PARTIAL)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` that writes beside the target, fsyncs and renames over it.

    Lightning's own write goes through a temporary file in ``$TMPDIR`` and moves it into place:
    with checkpoints on another filesystem (a node-local TMPDIR, shared storage) the move is a
    copy, which a kill cuts short, leaving a truncated ``last.ckpt`` and the temporary file
    behind. A rename within one directory is atomic. Remote paths (``s3://``) keep Lightning's
    write.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.{os.getpid()}{PARTIAL}")
        try:
            with open(partial, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        _fsync_folder(target.parent)


def _fsync_folder(folder: Path) -> None:
    # The rename itself reaches the disk only when the folder's entry does (POSIX).
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # a platform that cannot open folders (Windows): the rename is all we have
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
