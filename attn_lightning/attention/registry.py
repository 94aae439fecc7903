"""Name -> backend class: the one visible table from which YAML selects attention.

``build_attention("performer", head_dim=64, num_features=128)`` builds a backend; unknown names
and unknown options fail here, at build time, with the list of what is allowed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import yaml

from attn_lightning.attention.base import Attention
from attn_lightning.attention.cosformer import CosFormerAttention
from attn_lightning.attention.linear import LinearAttention
from attn_lightning.attention.mean import MeanAttention
from attn_lightning.attention.optimization import OptimizationAttention
from attn_lightning.attention.performer import PerformerAttention
from attn_lightning.attention.polynomial import PolynomialAttention
from attn_lightning.attention.polysketch import PolySketchAttention
from attn_lightning.attention.pooling import PoolAttention
from attn_lightning.attention.softmax import SoftmaxAttention
from attn_lightning.attention.taylor import TaylorAttention

# The table: every backend a config can name. ``register_attention`` adds user backends to it.
ATTENTIONS: dict[str, type[Attention]] = {
    "cosformer": CosFormerAttention,
    "linear": LinearAttention,
    "mean": MeanAttention,
    "optimization": OptimizationAttention,
    "performer": PerformerAttention,
    "polynomial": PolynomialAttention,
    "polysketch": PolySketchAttention,
    "pool": PoolAttention,
    "softmax": SoftmaxAttention,
    "taylor": TaylorAttention,
}

A = TypeVar("A", bound=type[Attention])


def register_attention(name: str) -> Callable[[A], A]:
    """Class decorator: make a user's own backend selectable by ``name`` (YAML, CLI specs).

    The extension point for code outside this package; the built-in backends are listed in
    ``ATTENTIONS`` directly. The class must subclass ``Attention`` and take its options as
    keyword-only constructor arguments next to ``head_dim``; its ``name`` is set to ``name``::

        @register_attention("my_attention")
        class MyAttention(Attention):
            def __init__(self, *, head_dim: int, temperature: float = 1.0) -> None: ...

    Raises:
        ValueError: ``name`` is already taken by another class.
    """

    def decorator(cls: A) -> A:
        if name in ATTENTIONS and ATTENTIONS[name] is not cls:
            raise ValueError(f"attention name {name!r} is already registered to {ATTENTIONS[name]}")
        cls.name = name
        ATTENTIONS[name] = cls
        return cls

    return decorator


def available_attentions() -> list[str]:
    """Sorted registry names."""
    return sorted(ATTENTIONS)


def attention_class(name: str) -> type[Attention]:
    """The class registered as ``name``; ValueError listing the names when there is none."""
    if not isinstance(name, str) or name not in ATTENTIONS:
        raise ValueError(
            f"unknown attention {name!r}; available: {', '.join(available_attentions())}"
        )
    return ATTENTIONS[name]


def attention_options(name: str) -> dict[str, Any]:
    """The YAML-settable options of a backend with their defaults (``head_dim`` excluded)."""
    params = inspect.signature(attention_class(name).__init__).parameters
    return {
        p.name: p.default
        for p in params.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "head_dim"
    }


def parse_attention_spec(spec: str) -> dict[str, Any]:
    """The command-line spelling of a backend -> its YAML dict.

    ``"performer:num_features=64,kernel=hyperbolic"`` -> ``{"name": "performer",
    "num_features": 64, "kernel": "hyperbolic"}``. Values are YAML scalars (``true``, ``null``,
    ``3``, ``0.5``, ``[1, 2]``), plus ``1e-6`` and ``none`` read as a float and None. Names and
    options are checked by ``build_attention``, not here (the sweep passes specs to other
    processes).

    Raises:
        ValueError: no name, or an item that is not ``key=value``.
    """
    name, _, rest = spec.strip().partition(":")
    if not name:
        raise ValueError(f"attention spec {spec!r} has no name; expected name[:key=value,...]")
    attention: dict[str, Any] = {"name": name}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad attention option {item!r} in {spec!r}: expected key=value")
        attention[key.strip()] = _parse_value(raw.strip())
    return attention


def _parse_value(text: str) -> Any:
    if text.lower() == "none":
        return None
    value = yaml.safe_load(text)
    if isinstance(value, str):  # YAML 1.1 reads "1e-6" as a string
        try:
            return float(value)
        except ValueError:
            return value
    return value


DEFAULT_ATTENTION: dict[str, Any] = {"name": "softmax"}


def resolve_attention(
    attention: Mapping[str, Any] | None, override: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Effective backend dict of a model: the override's keys replace the base's; a different
    ``name`` in the override replaces the whole dict (options of another backend would not
    apply); no base means ``DEFAULT_ATTENTION``. A task saves only the base in its checkpoint and
    builds its model from this (``tasks.base``)."""
    base = dict(DEFAULT_ATTENTION if attention is None else attention)
    if not override:
        return base
    if "name" in override and override["name"] != base.get("name"):
        return dict(override)
    return {**base, **override}


def build_attention(name: str | Mapping[str, Any], *, head_dim: int, **options: Any) -> Attention:
    """Build a backend from its registry name and options, or from a YAML-style spec mapping.

    ``build_attention("performer", head_dim=64, num_features=128)`` and
    ``build_attention({"name": "performer", "num_features": 128}, head_dim=64)`` are the same.

    Args:
        name: a registry name (see ``available_attentions()``) or a mapping with a ``name`` key
            and the options (what ``model.init_args.attention`` holds in YAML).
        head_dim: per-head query/key size D, given by the model.
        **options: backend tunables (e.g. ``num_features`` for performer); with a mapping,
            these override its entries.

    Raises:
        ValueError: a mapping without ``name``, an unknown name or option, naming what is allowed.
    """
    if isinstance(name, Mapping):
        if "name" not in name:
            raise ValueError(
                f"attention must be a dict with a 'name' key, e.g. {{'name': 'softmax'}}, "
                f"got {dict(name)!r}"
            )
        spec = {**name, **options}
    else:
        spec = {**options, "name": name}
    options = dict(spec)
    key = options.pop("name")
    cls = attention_class(key)
    allowed = attention_options(key)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        listed = ", ".join(f"{k} (default {v!r})" for k, v in allowed.items()) or "none"
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for attention {key!r}; "
            f"allowed: {listed}{_elsewhere(unknown)}"
        )
    return cls(head_dim=head_dim, **options)


def _elsewhere(options: list[str]) -> str:
    """``"; 'sketch_size' is an option of polysketch"``: where misplaced options belong."""
    hints = []
    for option in options:
        owners = [n for n in available_attentions() if option in attention_options(n)]
        if owners:
            hints.append(f"; {option!r} is an option of {', '.join(owners)}")
    return "".join(hints)
