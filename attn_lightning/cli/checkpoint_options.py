"""The model options a ``--ckpt_path`` replaced, said once.

With ``--ckpt_path`` LightningCLI parses the checkpoint's saved model hyper-parameters over the
configs and the command line (``app``): a ``--model.init_args.attention`` or a model size given
with a checkpoint is replaced by the checkpoint's value. That is what evaluating or resuming a
checkpoint needs (its weights fit only its own sizes), but a replaced value should not vanish
without a word: ``replaced_options`` finds them, ``say_replaced`` names them in one line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from typing import Any

from jsonargparse import Namespace

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
