"""Configs and flags written before the model sizes moved under ``net``, upgraded on the fly.

Until 2026-11-25 a task took its model's sizes one by one (``model.init_args.d_model: 64``); now
they are one typed spec, ``model.init_args.net`` (``attn_lightning.models.specs``), and the sizes
the data decides (``num_symbols``, ``image_size``, ``levels``, ``num_classes``, ...) are linked from
the DataModule (``LINKED_FROM_DATA``). Old YAML files and flags keep working: ``upgrade_args``
rewrites the command line before LightningCLI parses it — a config file with flat sizes is passed
on as its upgraded YAML text, ``--model.init_args.d_model 128`` becomes
``--model.init_args.net.d_model 128`` — and warns once per file or flag with the new spelling.
A model value of a linked size is dropped with a warning naming the DataModule key that sets it.
Checkpoints are upgraded by ``tasks.base.upgrade_hparams`` where they are read.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from attn_lightning.cli.config_checks import config_files
from attn_lightning.cli.errors import accepted_options

# Facts of the data the CLI links into the task's arguments of the same name (``app.py``).
LINKED_FROM_DATA = (
    "num_symbols",
    "seq_len",
    "image_size",
    "levels",
    "num_classes",
    "category_ids",
    "input_size",
    "vocab_size",
)


def task_class(args: Sequence[str], trees: Sequence[Any]) -> type | None:
    """The task class the configs and flags name (the last one given), or None."""
    named: str | None = None
    for tree in trees:
        model = tree.get("model") if isinstance(tree, Mapping) else None
        if isinstance(model, str):
            named = model
        elif isinstance(model, Mapping) and isinstance(model.get("class_path"), str):
            named = model["class_path"]
    for i, arg in enumerate(args):
        for flag in ("--model", "--model.class_path"):
            if arg == flag and i + 1 < len(args):
                named = args[i + 1]
            elif arg.startswith(flag + "="):
                named = arg.split("=", 1)[1]
    if not named or "." not in named:
        return None
    module, _, name = named.rpartition(".")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None  # LightningCLI names a bad class path itself
    return found if isinstance(found, type) else None


def _moved_keys(task: type | None) -> tuple[str, ...]:
    spec = getattr(task, "net_spec", None)
    if spec is None:
        return ()
    from attn_lightning.models.specs import spec_fields

    return spec_fields(spec)


def upgrade_tree(tree: Any, task: type | None) -> tuple[Any, list[str]]:
    """A parsed config with flat model sizes moved under ``net`` and linked sizes dropped.

    Returns the upgraded tree and one note per change (empty: nothing was old).
    """
    if not isinstance(tree, Mapping) or not isinstance(tree.get("model"), Mapping):
        return tree, []
    model = dict(tree["model"])
    init = model.get("init_args")
    if not isinstance(init, Mapping):
        return tree, []
    init = dict(init)
    notes = []
    moved = [k for k in _moved_keys(task) if k in init]
    if moved:
        net = init.get("net") if isinstance(init.get("net"), Mapping) else {}
        init["net"] = {**{k: init.pop(k) for k in moved}, **dict(net or {})}
        notes += [f"model.init_args.{k} is now model.init_args.net.{k}" for k in moved]
    for key in LINKED_FROM_DATA:
        if key in init and task is not None and _accepts(task, key):
            value = init.pop(key)
            notes.append(
                f"model.init_args.{key}={value!r} is ignored: the model takes it from the "
                f"DataModule (data.init_args.{key})"
            )
    model["init_args"] = init
    return {**tree, "model": model}, notes


def _accepts(task: type, key: str) -> bool:
    return key in accepted_options(task)


def upgrade_flags(args: Sequence[str], task: type | None) -> tuple[list[str], list[str]]:
    """Flags that set a flat model size, renamed under ``net``; linked sizes dropped."""
    moved = set(_moved_keys(task))
    out: list[str] = []
    notes: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
            continue
        name, eq, value = arg.partition("=")
        key = _model_key(name)
        if key in moved:
            new = f"--model.init_args.net.{key}"
            notes.append(f"{name} is now {new}")
            out.append(new + eq + value)
            continue
        if key in LINKED_FROM_DATA and task is not None and _accepts(task, key):
            notes.append(
                f"{name} is ignored: the model takes {key} from the DataModule "
                f"(--data.init_args.{key})"
            )
            skip = not eq and i + 1 < len(args)
            continue
        out.append(arg)
    return out, notes


def _model_key(flag: str) -> str | None:
    for prefix in ("--model.init_args.", "--model."):
        if flag.startswith(prefix):
            key = flag[len(prefix) :]
            return key if "." not in key else None
    return None


def upgrade_args(args: Sequence[str]) -> list[str]:
    """The command line with old configs and flags upgraded (see the module docstring).

    A config file that needs no change is passed on as its path; one that does is passed on as
    its upgraded YAML text, with a ``FutureWarning`` naming the file and each change.
    """
    paths = config_files(args)
    trees: dict[Path, Any] = {}
    for path in paths:
        try:
            trees[path] = yaml.safe_load(path.read_text()) if path.is_file() else None
        except yaml.YAMLError:
            trees[path] = None  # jsonargparse reports the syntax error
    task = task_class(args, list(trees.values()))
    replaced: dict[str, str] = {}
    for path, tree in trees.items():
        upgraded, notes = upgrade_tree(tree, task)
        if notes:
            _warn(f"{path}: " + "; ".join(notes) + " (upgraded for this run; edit the file)")
            replaced[str(path)] = yaml.safe_dump(upgraded, sort_keys=False)
    out = []
    for arg in args:
        if arg.startswith("--config=") and arg.split("=", 1)[1] in replaced:
            out.append("--config=" + replaced[arg.split("=", 1)[1]])
        else:
            out.append(replaced.get(arg, arg) if out and out[-1] in ("--config", "-c") else arg)
    flags, notes = upgrade_flags(out, task)
    if notes:
        _warn("; ".join(notes))
    return flags


def _warn(message: str) -> None:
    warnings.warn(message, FutureWarning, stacklevel=3)


def upgraded_hparams(task: type, hparams: Mapping[str, Any]) -> dict[str, Any]:
    """A checkpoint's saved hyper-parameters in today's layout (``tasks.base.upgrade_hparams``),
    warning once when something was old. Linked sizes the task does not take (written by a
    run before the links were filtered, ``LinkedOnly``) are dropped."""
    from attn_lightning.tasks.base import upgrade_hparams

    accepted = accepted_options(task)
    kept = {k: v for k, v in hparams.items() if k not in LINKED_FROM_DATA or k in accepted}
    upgraded, moved = upgrade_hparams(task, kept)
    if moved:
        _warn(
            f"the checkpoint saved the model sizes {', '.join(moved)} of the layout before "
            f"2026-11-25; they are read as net.<size>"
        )
    return upgraded


class AcceptedLinks:
    """Wraps LightningCLI's model instantiator so a task's hyper-parameters record only the
    links it takes: every link of ``LINKED_FROM_DATA`` is applied (a task without the argument
    ignores it), but Lightning would write all of them, ``levels: None`` included, into the
    hyper-parameters, and a checkpoint of those could not be loaded back."""

    def __init__(self, instantiator: Any, key: str = "model") -> None:
        self.instantiator = instantiator
        self.key = key

    def __call__(
        self, class_type: type, *args: Any, applied_instantiation_links: dict, **kwargs: Any
    ) -> Any:
        accepted = accepted_options(class_type)
        prefix = f"{self.key}.init_args."
        links = {
            k: v
            for k, v in applied_instantiation_links.items()
            if not k.startswith(prefix) or k[len(prefix) :] in accepted
        }
        return self.instantiator(class_type, *args, applied_instantiation_links=links, **kwargs)
