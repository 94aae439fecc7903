"""Hybrid stacks: one backend per layer, from the one attention mapping every model already takes.

The ``attention`` dict a task passes to its model names the backend of every layer; a ``layers``
key in it gives some layers their own::

    attention:
      name: linear            # every layer ...
      layers:
        0: {name: softmax}    # ... except layer 0 (Zoology's and Based's hybrids: a little exact
                              # attention beside a fixed-size state)

Each entry follows the rule of ``attention_override`` (``attention.resolve_attention``): its
keys replace the default's, and a different ``name`` replaces the whole dict (another backend's
options would not apply), so ``layers: {1: {num_features: 512}}`` changes one option of one layer.

Why a key inside ``attention`` rather than a task argument or a list of one dict per layer: the
attention dict is already what every transformer task saves as a hyper-parameter and hands to its
``TransformerEncoder``, so a mixed stack works under every such task (reversal, recall, image, ViT)
with no new argument, and checkpoints, resume (``--ckpt_path`` restores it), warm-start and
``attention_override`` treat it as any other backend dict. A mapping names only the layers that
differ, so changing ``net.num_layers`` does not invalidate it, and an index the stack does not have
is an error naming it. Indices are ints (a command line's ``"0"`` is read as 0); a negative one
counts from the top, as in Python (``-1: {name: softmax}`` is the last layer at any depth), and
two keys naming one layer (``1`` and ``-1`` of a two-layer stack) are an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

LAYERS_KEY = "layers"


def layer_attentions(attention: Mapping[str, Any], *, num_layers: int) -> list[dict[str, Any]]:
    """The backend dict of each of ``num_layers`` layers (see the module docstring).

    Args:
        attention: a backend dict, with an optional ``layers`` mapping of layer index -> entry.
        num_layers: the stack's depth.

    Raises:
        ValueError: ``layers`` not a mapping, an index that is not an int in
            ``[-num_layers, num_layers)`` (naming it and the range), two keys for one layer, or an
            entry that is not a mapping.
    """
    default = {k: v for k, v in attention.items() if k != LAYERS_KEY}
    entries = attention.get(LAYERS_KEY) or {}
    if not isinstance(entries, Mapping):
        raise ValueError(
            f"attention.{LAYERS_KEY} must map a layer index to a backend dict, e.g. "
            f"{{0: {{name: softmax}}}}, got {entries!r}"
        )
    layers = [dict(default) for _ in range(num_layers)]
    keys: dict[int, object] = {}
    for key, entry in entries.items():
        index = _index(key, num_layers)
        if index in keys:
            raise ValueError(
                f"attention.{LAYERS_KEY} names layer {index} twice, as {keys[index]!r} and "
                f"{key!r}: give each layer one entry"
            )
        keys[index] = key
        if not isinstance(entry, Mapping):
            raise ValueError(
                f"attention.{LAYERS_KEY}.{key} must be a backend dict, e.g. {{name: softmax}}, "
                f"got {entry!r}"
            )
        if "name" in entry and entry["name"] != default.get("name"):
            layers[index] = dict(entry)
        else:
            layers[index] = {**default, **entry}
    return layers


def _index(key: object, num_layers: int) -> int:
    """``key`` as a layer index in ``[0, num_layers)``, a negative one counted from the top; a
    ValueError naming it otherwise."""
    text = str(key)
    number = text[1:] if text.startswith("-") else text
    if isinstance(key, bool) or not (isinstance(key, int) or number.isdigit()):
        raise ValueError(
            f"attention.{LAYERS_KEY} has key {key!r}; keys are layer indices 0..{num_layers - 1} "
            f"(or -1..-{num_layers}, counted from the top)"
        )
    index = int(text)
    if not -num_layers <= index < num_layers:
        raise ValueError(
            f"attention.{LAYERS_KEY} names layer {index}, which does not exist: the stack has "
            f"{num_layers} layer(s), indices 0..{num_layers - 1} (or -1..-{num_layers})"
        )
    return index % num_layers


__all__ = ["LAYERS_KEY", "layer_attentions"]
