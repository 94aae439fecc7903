"""Warm-start: a fresh run whose model starts from another run's weights, with its own attention.

``train.py fit ... --init_from CKPT`` builds the model the configs describe — with the backend
they name, which may differ from the checkpoint's — and copies every weight of the checkpoint's
model into it before training: a new optimizer, step 0, its own run folder. Three things differ
from the two other ways of using a checkpoint:

* ``fit --ckpt_path`` *resumes*: the checkpoint's own hyper-parameters (attention included),
  optimizer state and step count;
* ``validate/test --ckpt_path`` with ``attention_override`` *evaluates* a checkpoint with other
  backend options, no training;
* ``fit --init_from`` *starts* a new training run from its weights (Performer's "backward
  compatibility": a softmax model's weights with FAVOR+ attention and a little fine-tuning).

The backends' own tensors (Performer's projection, PolySketch's sketch and LayerNorms, learned
coefficients: everything inside an ``Attention`` module) are never copied — they belong to the
backend the configs name and keep their fresh initialisation. Every other tensor must be in the
checkpoint with the same shape: a checkpoint of another experiment or of another size is a
one-line error naming both. ``freeze`` keeps only the named parameters trainable (e.g. the
attention projections), for a fine-tune of the swapped layers alone.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attn_lightning.attention import Attention
from attn_lightning.cli.checkpoints import (
    CheckpointError,
    load_checkpoint,
    resolve_class,
    saved_class,
)


@dataclass
class WarmStart:
    """What a warm start copied: the source, the tensors taken from it, those kept fresh."""

    source: str
    loaded: list[str] = field(default_factory=list)
    fresh: list[str] = field(default_factory=list)
    frozen: int = 0
    trainable: int = 0

    def line(self) -> str:
        """The one line the run prints."""
        fresh = f"; new: {', '.join(_short(self.fresh))}" if self.fresh else ""
        frozen = (
            f"; {self.frozen} parameter tensors frozen, {self.trainable} trainable"
            if self.frozen
            else ""
        )
        return (
            f"warm start from {self.source}: {len(self.loaded)} tensors from the checkpoint, "
            f"{len(self.fresh)} new (attention backends){fresh}{frozen}"
        )


def _short(names: Sequence[str], keep: int = 4) -> list[str]:
    return [*names[:keep], *([f"... ({len(names) - keep} more)"] if len(names) > keep else [])]


def backend_prefixes(model: nn.Module) -> tuple[str, ...]:
    """``"<module path>."`` of every attention backend in ``model``."""
    return tuple(f"{name}." for name, m in model.named_modules() if isinstance(m, Attention))


def warm_start(
    task: nn.Module, path: str | Path, *, freeze_except: Sequence[str] = ()
) -> WarmStart:
    """Copy a checkpoint's model weights into ``task`` (see the module docstring).

    Args:
        task: the freshly built task (a LightningModule of this package).
        path: the source checkpoint (any layout ``load_checkpoint`` reads).
        freeze_except: glob patterns of parameter names (e.g. ``*attn.*``) that stay trainable;
            every other parameter is frozen. Empty: train everything.

    Raises:
        CheckpointError: the file is missing or corrupt, holds another experiment's task, or a
            tensor outside the backends is missing from it or has another shape; or a pattern of
            ``freeze_except`` matches no parameter.
    """
    source = str(path)
    adaptation = getattr(task, "adaptation", "base")
    if adaptation != "base":
        raise CheckpointError(
            f"--init_from with adaptation={adaptation!r}: that adaptation starts from "
            f"model.init_args.base_checkpoint (or from random weights); warm-start a "
            f"adaptation=base run instead"
        )
    checkpoint = load_checkpoint(path, flag="--init_from")
    saved = saved_class(checkpoint, "hyper_parameters")
    if saved is not None and resolve_class(saved) is not type(task):
        raise CheckpointError(
            f"--init_from {source!r} holds a {saved.rpartition('.')[2]} "
            f"({saved}) but the config builds {type(task).__name__} "
            f"({type(task).__module__}.{type(task).__name__}); warm-start from a checkpoint of "
            f"the same experiment"
        )
    state: dict[str, torch.Tensor] = checkpoint["state_dict"]
    own = task.state_dict()
    backends = backend_prefixes(task)
    record = WarmStart(source)
    merged: dict[str, Any] = {}
    for key, value in own.items():
        if key.startswith(backends):
            merged[key] = value
            record.fresh.append(key)
            continue
        if key not in state:
            raise CheckpointError(
                f"--init_from {source!r} has no tensor {key!r} that the configured model has "
                f"(another model size or layout?); its model: {_shapes_hint(state, key)}"
            )
        if state[key].shape != value.shape:
            raise CheckpointError(
                f"--init_from {source!r}: {key} is {tuple(state[key].shape)} there but "
                f"{tuple(value.shape)} in the configured model; use the checkpoint's model sizes "
                f"(model.init_args.net)"
            )
        merged[key] = state[key]
        record.loaded.append(key)
    task.load_state_dict(merged, strict=True)
    if freeze_except:
        _freeze(task, freeze_except, record)
    return record


def _shapes_hint(state: dict[str, torch.Tensor], key: str) -> str:
    stem = key.rsplit(".", 1)[0]
    near = [k for k in state if k.startswith(stem)] or list(state)[:3]
    return ", ".join(f"{k} {tuple(state[k].shape)}" for k in near[:3])


def _freeze(task: nn.Module, patterns: Sequence[str], record: WarmStart) -> None:
    names = [name for name, _ in task.named_parameters()]
    unmatched = [p for p in patterns if not any(fnmatch.fnmatchcase(n, p) for n in names)]
    if unmatched:
        raise CheckpointError(
            f"--freeze_except {unmatched} matches no parameter; names look like "
            f"{', '.join(names[:3])}"
        )
    for name, param in task.named_parameters():
        keep = any(fnmatch.fnmatchcase(name, p) for p in patterns)
        param.requires_grad_(keep)
        if keep:
            record.trainable += 1
        else:
            record.frozen += 1


def warm_start_from_config(config: Any, subcommand: str | None, task: Any) -> WarmStart | None:
    """``--init_from`` / ``--freeze_except`` of a parsed subcommand applied to the task just built;
    None without ``--init_from``. The source is recorded on the task (``init_from``: in the
    TensorBoard hyper-parameters and the checkpoints it writes).

    Raises:
        ValueError: ``--freeze_except`` without ``--init_from``, ``--init_from`` outside ``fit`` or
            beside ``--ckpt_path`` (which resumes a run); CheckpointError from ``warm_start``.
    """
    source, keep = config.get("init_from"), config.get("freeze_except")
    if not source:
        if keep:
            raise ValueError("--freeze_except goes with --init_from (a warm-started fit)")
        return None
    if subcommand != "fit":
        raise ValueError(
            f"--init_from starts a fit from a checkpoint's weights; for {subcommand} give the "
            f"checkpoint as --ckpt_path"
        )
    if config.get("ckpt_path"):
        raise ValueError(
            "--init_from starts a new run from a checkpoint's weights and --ckpt_path resumes "
            "one: give one of them"
        )
    record = warm_start(task, source, freeze_except=keep or ())
    task.init_from = str(source)
    return record
