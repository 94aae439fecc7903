"""peft plumbing of the adaptation tasks: LoRA config, wrapping, base weights, merged copies.

LoRA (Hu et al. 2021) replaces a frozen ``W`` by ``W + (α/r)·B·A`` with ``A: (r, d_in)``,
``B: (d_out, r)``; ``B = 0`` at initialisation, so the adapted model starts equal to the base.
A ``d_in → d_out`` layer gains ``r·(d_in + d_out)`` trainable parameters.

No Lightning here: the tasks (``attn_lightning.tasks.adaptation``) and the adapter-export
callback (``attn_lightning.callbacks.exports``) are built on these helpers.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from torch import Tensor, nn

ADAPTATIONS = ("base", "full", "lora", "lora_scratch")
"""What trains: everything from scratch, everything from the base checkpoint, LoRA adapters on
the frozen base checkpoint, LoRA adapters on a frozen random model."""
FROM_BASE = ("full", "lora")
"""Adaptations that start from ``base_checkpoint``."""
ADAPTED = ("lora", "lora_scratch")
"""Adaptations whose model is wrapped with peft adapters."""
LORA_BIAS = ("none", "lora_only", "all")


def check_adaptation(adaptation: str) -> None:
    """Raise a ``ValueError`` naming the allowed values unless ``adaptation`` is one of them."""
    if adaptation not in ADAPTATIONS:
        raise ValueError(f"unknown adaptation {adaptation!r}; allowed: {', '.join(ADAPTATIONS)}")


def build_lora_config(
    *,
    r: int,
    lora_alpha: float | None,
    lora_dropout: float,
    target_modules: Sequence[str],
    modules_to_save: Sequence[str] | None,
    bias: str = "none",
) -> LoraConfig:
    """A peft ``LoraConfig``; ``lora_alpha=None`` means ``α = r`` (scaling α/r = 1 at every rank).

    ``bias``: peft's ``none`` (biases frozen), ``lora_only`` (biases of adapted layers train) or
    ``all`` (every bias trains).
    """
    if not isinstance(r, int) or r <= 0:
        raise ValueError(f"lora_r must be a positive int, got {r!r}")
    if not 0.0 <= lora_dropout < 1.0:
        raise ValueError(f"lora_dropout must be in [0, 1), got {lora_dropout!r}")
    if bias not in LORA_BIAS:
        raise ValueError(f"unknown lora bias {bias!r}; allowed: {', '.join(LORA_BIAS)}")
    if not target_modules:
        raise ValueError("target_modules must name at least one nn.Linear to adapt")
    return LoraConfig(
        r=r,
        lora_alpha=cast(int, r if lora_alpha is None else lora_alpha),  # peft takes floats too
        lora_dropout=lora_dropout,
        target_modules=list(target_modules),
        modules_to_save=list(modules_to_save) if modules_to_save else None,
        bias=cast(Literal["none", "all", "lora_only"], bias),
    )


def wrap_with_lora(model: nn.Module, config: LoraConfig) -> PeftModel:
    """Inject adapters into ``model`` (in place) and freeze everything else.

    Raises a ``ValueError`` naming the valid layer names when a target does not exist.
    """
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules() if name}
    targets = config.target_modules
    wanted = {targets} if isinstance(targets, str) else set(targets or ())
    wanted |= set(config.modules_to_save or ())
    missing = sorted(wanted - names)
    if missing:
        linear = sorted(
            {n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)}
        )
        raise ValueError(
            f"LoRA target(s) {', '.join(missing)} not found in {type(model).__name__}; "
            f"its nn.Linear layers are named: {', '.join(linear)}"
        )
    return get_peft_model(model, config)


def trainable_parameters(module: nn.Module) -> int:
    """Number of parameters with ``requires_grad`` (adapters + modules_to_save under peft).

    The one trainable-parameter counter of the adaptation tasks.
    """
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


def merged_copy(model: nn.Module) -> nn.Module:
    """A plain copy of ``model`` with ``W + (α/r)·B·A`` folded in (a copy as is when it has no
    adapters); ``model`` itself is left adapted."""
    if isinstance(model, PeftModel):
        return copy.deepcopy(model).merge_and_unload()
    return copy.deepcopy(model)


def load_base_state(
    path: str | Path,
    expected: Mapping[str, Tensor],
    *,
    prefix: str = "net.",
    what: str,
    hparams: Mapping[str, Any] | None = None,
) -> dict[str, Tensor]:
    """Weights for a plain (un-adapted) model from a Lightning checkpoint or a state dict file.

    Args:
        path: ``.ckpt`` written by ``train.py`` (keys ``<prefix><name>``) or ``torch.save``'d
            state dict of the bare model (keys ``<name>``).
        expected: the bare model's ``state_dict()``; every key must be present with its shape.
        prefix: the task attribute holding the model in the checkpoint.
        what: words for the error messages, e.g. ``"an adaptation=base LoRAClassifierTask run"``.
        hparams: hyper-parameters the checkpoint must have saved with these values (when it
            saved them), for differences the shapes do not show (attention backend, layout).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: the file holds something else (missing keys, other shapes, peft adapters).
    """
    file = Path(path)
    if not file.is_file():
        raise FileNotFoundError(
            f"base_checkpoint {str(path)!r} does not exist (resolved: {file.resolve()}); "
            f"expected the checkpoint of {what}"
        )
    try:
        raw: Any = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as error:  # pickle errors, truncated files, foreign objects
        raise ValueError(
            f"base_checkpoint {str(path)!r} could not be read with torch.load(weights_only=True) "
            f"({type(error).__name__}: {error}); expected the checkpoint of {what}"
        ) from error
    saved = raw.get("hyper_parameters", {}) if isinstance(raw, Mapping) else {}
    differ = [
        f"{k}={got!r} (expected {v!r})"
        for k, v in (hparams or {}).items()
        if (got := _saved_value(saved, k)) is not _ABSENT and got != v
    ]
    if differ:
        raise ValueError(
            f"base_checkpoint {str(path)!r} is incompatible: it was trained with "
            f"{', '.join(differ)}; expected the checkpoint of {what}"
        )
    state = raw.get("state_dict", raw) if isinstance(raw, Mapping) else None
    if not isinstance(state, Mapping):
        raise ValueError(f"base_checkpoint {str(path)!r} holds no state dict; expected {what}")
    if any(k.startswith(prefix) for k in state):
        state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
    if any("lora_" in k or "base_model.model." in k for k in state):
        raise ValueError(
            f"base_checkpoint {str(path)!r} holds a peft-adapted model; expected a plain model, "
            f"the checkpoint of {what} (merge and export an adapted model first)"
        )
    missing = [k for k in expected if k not in state]
    reshaped = [
        f"{k}: {tuple(state[k].shape)} (expected {tuple(v.shape)})"
        for k, v in expected.items()
        if k in state and state[k].shape != v.shape
    ]
    if missing or reshaped:
        shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in expected.items())
        raise ValueError(
            f"base_checkpoint {str(path)!r} is incompatible with the model: "
            f"missing {missing or 'nothing'}; wrong shapes {reshaped or 'none'}. "
            f"Expected the checkpoint of {what}, with {shapes}"
        )
    return {k: state[k] for k in expected}


_ABSENT = object()


def _saved_value(saved: Mapping[str, Any], key: str) -> Any:
    """``saved[key]``; a dotted ``group.key`` is ``saved[group][key]`` or, in checkpoints saved
    before the model sizes moved under ``net``, the flat ``saved[key]``; ``_ABSENT`` if neither."""
    if key in saved:
        return saved[key]
    group, _, leaf = key.partition(".")
    nested = saved.get(group)
    if leaf and isinstance(nested, Mapping) and leaf in nested:
        return nested[leaf]
    return saved.get(leaf, _ABSENT) if leaf else _ABSENT


# peft renames a wrapped layer's tensors: ``fc1.weight`` -> ``fc1.base_layer.weight`` (adapted),
# ``fc3.original_module.weight`` + ``fc3.modules_to_save.default.weight`` (modules_to_save).
_PEFT_INFIXES = (".base_layer", ".original_module", ".modules_to_save.default")


def _plain_key(key: str) -> str | None:
    if "lora_" in key:
        return None
    for infix in _PEFT_INFIXES:
        key = key.replace(infix, "")
    return key


def plain_state(model: nn.Module) -> dict[str, Tensor]:
    """The state dict ``model`` would have without peft (adapter tensors left out)."""
    inner = model.get_base_model() if isinstance(model, PeftModel) else model
    state: dict[str, Tensor] = {}
    for key, value in inner.state_dict().items():
        plain = _plain_key(key)
        if plain is not None:
            state.setdefault(plain, value)
    return state


@torch.no_grad()
def copy_plain_state(model: nn.Module, state: Mapping[str, Tensor]) -> None:
    """Copy a plain model's ``state`` into ``model``'s base weights, adapted or not.

    Adapter tensors are left as they are; a ``modules_to_save`` layer gets the weights both in its
    frozen original and in its trainable copy.
    """
    inner = model.get_base_model() if isinstance(model, PeftModel) else model
    for key, tensor in inner.state_dict().items():
        plain = _plain_key(key)
        if plain is not None:
            tensor.copy_(state[plain])
