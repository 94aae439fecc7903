"""Reading ``--ckpt_path`` before anything is built: a clear error for a missing, corrupt or
foreign file, for a checkpoint of another task or DataModule than the config's, and for an
evaluation without a checkpoint (``--ckpt_path initial`` evaluates the initial weights on purpose);
and the model options the checkpoint replaced, said once.

Lightning would otherwise parse a reversal checkpoint's task over an image config and fail late
(``KeyError: 'source'``), and answer a file of random bytes with "re-run torch.load with
weights_only=False" — an unsafe hint for a file nobody should unpickle.

With ``--ckpt_path`` LightningCLI parses the checkpoint's saved model hyper-parameters over the
configs and the command line (``app``): an attention or a model size given with a checkpoint is
replaced by the checkpoint's value. Evaluating or resuming needs that (its weights fit only its
own sizes), but a replaced value should not vanish without a word: ``say_replaced`` names them.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace


class CheckpointError(ValueError):
    """A ``--ckpt_path`` that cannot be used, with the reason in one line."""


# The package whose classes a checkpoint's class path may import (``resolve_class``).
OWN = "attn_lightning."

# ``--ckpt_path initial``: evaluate the weights the config builds (untrained, or a LoRA task's
# base_checkpoint), on purpose. Lightning's ckpt_path names ("best", "last") are its family.
INITIAL = "initial"


def check_evaluated_weights(subcommand: str, config: Any) -> None:
    """Refuse ``validate``/``test``/``predict`` without ``--ckpt_path``; ``initial`` opts in.

    Lightning evaluates the model as built when no checkpoint is given: random weights whose
    metrics and predictions look like a result. ``--ckpt_path initial`` asks for them and is
    replaced by None in ``config`` (Lightning's "the model's current weights").

    Raises:
        CheckpointError: an evaluation without ``--ckpt_path``, or ``fit --ckpt_path initial``.
    """
    ckpt_path = config.get("ckpt_path")
    if subcommand == "fit":
        if ckpt_path == INITIAL:
            raise CheckpointError(
                "fit starts from the initial weights without --ckpt_path; --ckpt_path resumes a "
                "run from its checkpoint (--ckpt_path initial is for validate/test/predict)"
            )
        return
    if ckpt_path == INITIAL:
        config["ckpt_path"] = None
    elif not ckpt_path:
        raise CheckpointError(
            f"{subcommand} without --ckpt_path would evaluate the weights the config initialises "
            f"(untrained: numbers and predictions that mean nothing); give --ckpt_path "
            f"checkpoints/<experiment>/<run>/last.ckpt (or best-step=N.ckpt), or --ckpt_path "
            f"{INITIAL} to {subcommand} the initial weights on purpose"
        )


def load_checkpoint(path: str | Path, *, flag: str = "--ckpt_path") -> dict[str, Any]:
    """``torch.load`` with ``weights_only=True``; CheckpointError naming the file otherwise.

    Args:
        path: the checkpoint.
        flag: the option that gave it, named in the error (``--init_from``, ``--checkpoints``).

    Raises:
        CheckpointError: the file does not exist, is not a torch checkpoint (corrupt, truncated,
            another format) or holds no Lightning state (``state_dict``).
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{flag} {str(path)!r}: no such file")
    checkpoint, problem = _read(path)
    if problem:
        # A checkpoint cut short (a full disk, a copy killed midway): name the newest one beside it
        # that reads, so the run can go on from there.
        intact = newest_intact(path.parent, besides=path)
        also = (
            f"; the newest intact checkpoint in its folder is {str(intact[0])!r} (step {intact[1]})"
            if intact
            else ""
        )
        raise CheckpointError(f"{flag} {str(path)!r} {problem}{also}")
    return checkpoint


def read_weights(path: Path) -> tuple[Any, str | None]:
    """What ``torch.load(path, weights_only=True)`` returns and None, or None and why the file
    cannot be read (for a message ``<flag> <path> <why>``)."""
    try:
        return torch.load(path, weights_only=True, map_location="cpu"), None
    except OSError as e:  # a permission, a folder, an I/O error: the file itself is unreadable
        return None, f"cannot be read ({type(e).__name__}: {e.strerror or e})"
    except Exception as e:
        # weights_only=True refuses anything but tensors and primitives: a file it cannot read is
        # corrupt, truncated or not a checkpoint, never something to unpickle unsafely — so
        # torch's own advice (retry with weights_only=False) is not passed on. Junk bytes fail
        # in its unpickler with any error (b"hello" is a memo lookup: KeyError: 101).
        reason = str(e).split(".")[0].strip()
        detail = "" if "weights_only" in str(e) else f": {' '.join(reason.split())[:120]}"
        return None, f"is corrupt or not a Lightning checkpoint ({type(e).__name__}{detail})"


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """The checkpoint at ``path`` and None, or {} and why it is not a Lightning checkpoint."""
    checkpoint, problem = read_weights(path)
    if problem:
        return {}, problem
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        return {}, "is not a Lightning checkpoint (no 'state_dict' entry)"
    return checkpoint, None


def newest_intact(folder: Path, *, besides: Path | None = None) -> tuple[Path, int] | None:
    """The most recently written checkpoint in ``folder`` that loads, and its step (or None)."""
    candidates = [p for p in folder.glob("*.ckpt") if p.is_file() and p != besides]
    for candidate in sorted(candidates, key=lambda p: p.stat().st_mtime, reverse=True):
        checkpoint, problem = _read(candidate)
        if not problem:
            return candidate, int(checkpoint.get("global_step", 0))
    return None


def saved_class(checkpoint: dict[str, Any], key: str) -> str | None:
    """The class path the CLI saved for the model (``hyper_parameters``) or the DataModule
    (``datamodule_hyper_parameters``); None if absent."""
    class_path = checkpoint.get(key, {}).get("_class_path")
    return class_path if isinstance(class_path, str) else None


def check_classes(checkpoint: dict[str, Any], path: str | Path, config: Any) -> None:
    """CheckpointError if the checkpoint's task or DataModule class differs from the config's.

    Args:
        checkpoint: what ``load_checkpoint`` returned.
        path: the checkpoint's path (named in the error).
        config: the subcommand's parsed config (``model`` and ``data`` namespaces).
    """
    for section, key, what in (
        ("model", "hyper_parameters", "task"),
        ("data", "datamodule_hyper_parameters", "DataModule"),
    ):
        saved = saved_class(checkpoint, key)
        configured = _configured_class(config, section)
        if saved and configured and resolve_class(saved) != resolve_class(configured):
            raise CheckpointError(
                f"--ckpt_path {str(path)!r} holds a {saved.rpartition('.')[2]} {what} "
                f"({saved}) but the config builds {configured.rpartition('.')[2]} "
                f"({configured}); use a checkpoint of this experiment or the config it was "
                f"trained with"
            )


def resolve_class(class_path: str) -> object:
    """The class a dotted path under ``attn_lightning.`` names, so that a module path and a
    package path of one class compare equal; any other path (or one that does not import) is
    returned as it is: a checkpoint's ``_class_path`` never makes us import another package."""
    if not class_path.startswith(OWN):
        return class_path
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return class_path


def _configured_class(config: Any, section: str) -> str | None:
    node: Any = config.get(section) if hasattr(config, "get") else None
    class_path = node.get("class_path") if hasattr(node, "get") else None
    return class_path if isinstance(class_path, str) else None


def load_task(
    path: str | Path,
    *,
    map_location: str | torch.device = "cpu",
    default: type | None = None,
    flag: str = "--ckpt_path",
) -> Any:
    """The task a checkpoint holds, rebuilt from its saved hyper-parameters and weights.

    For tools that read a trained model outside ``train.py`` (sample grids, generation
    benchmarks). Unlike ``LightningModule.load_from_checkpoint`` it finds the task class in the
    hyper-parameters the CLI saved (``_class_path``). The task is in eval mode on ``map_location``.
    ``default`` is the class of a checkpoint that names none (saved by a plain ``Trainer``);
    ``flag`` is the option that gave ``path`` (named in errors).

    Raises:
        CheckpointError: not a checkpoint, or one that names no task class of this package.
    """
    checkpoint = load_checkpoint(path, flag=flag)
    class_path = saved_class(checkpoint, "hyper_parameters")
    task_class = resolve_class(class_path) if class_path else default
    if not isinstance(task_class, type):
        raise CheckpointError(
            f"{flag} {str(path)!r} names no task class of {OWN.rstrip('.')} in its "
            f"hyper-parameters ({class_path!r}); expected a checkpoint written by train.py"
        )
    saved = {k: v for k, v in checkpoint["hyper_parameters"].items() if not k.startswith("_")}
    task = task_class(**saved)
    task.load_state_dict(checkpoint["state_dict"])
    return task.to(map_location).eval()


log = logging.getLogger("attn_lightning")

# Shown per replaced option at most (a long list or dict is cut here).
SHOWN = 60


def model_options(model: Any) -> dict[str, Any]:
    """A parsed ``model`` section's init args as plain values (``{}`` without any)."""
    if isinstance(model, Namespace):
        model = model.as_dict()
    init_args = model.get("init_args") if isinstance(model, Mapping) else None
    return dict(init_args) if isinstance(init_args, Mapping) else {}


def _flat(options: Mapping[str, Any], where: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in options.items():
        here = f"{where}.{key}" if where else str(key)
        if isinstance(value, Mapping) and value and key != "attention":
            yield from _flat(value, here)
        else:
            yield here, value


def replaced_options(
    before: Mapping[str, Any], after: Mapping[str, Any]
) -> list[tuple[str, Any, Any]]:
    """``(dotted option, configured value, checkpoint's value)`` of every model option given a
    value (not None: None is "from the data", linked later) that the checkpoint changed (an
    attention spec compared whole), in the config's order."""
    old, new = dict(_flat(before)), dict(_flat(after))
    return [
        (key, value, new[key])
        for key, value in old.items()
        if value is not None and new.get(key, value) != value
    ]


def say_replaced(before: Mapping[str, Any], after: Mapping[str, Any], ckpt_path: str) -> None:
    """Log one line naming the model options the checkpoint at ``ckpt_path`` replaced (none:
    nothing)."""
    replaced = replaced_options(before, after)
    if not replaced:
        return

    def shown(value: Any) -> str:
        text = repr(value)
        return text if len(text) <= SHOWN else text[: SHOWN - 3] + "..."

    changes = ", ".join(f"{key} {shown(old)} -> {shown(new)}" for key, old, new in replaced)
    log.warning(
        "--ckpt_path %s: the model is built with the checkpoint's options, replacing the given "
        "%s (--model.init_args.attention_override evaluates other backend options)",
        ckpt_path,
        changes,
    )
