"""Name -> backend class: the one visible table from which YAML selects attention.

``build_attention("performer", head_dim=64, num_features=128)`` builds a backend; unknown names
and unknown options fail here, at build time, with the list of what is allowed.
"""

from __future__ import annotations

import inspect
from typing import Any, TypeVar

from attn_lightning.attention.base import Attention

_REGISTRY: dict[str, type[Attention]] = {}

A = TypeVar("A", bound=type[Attention])


def register_attention(name: str):
    """Class decorator: make a backend selectable by ``name``."""

    def decorator(cls: A) -> A:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"attention name {name!r} is already registered to {_REGISTRY[name]}")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return decorator


def available_attentions() -> list[str]:
    """Sorted registry names."""
    return sorted(_REGISTRY)


def attention_class(name: str) -> type[Attention]:
    if not isinstance(name, str) or name not in _REGISTRY:
        raise ValueError(
            f"unknown attention {name!r}; available: {', '.join(available_attentions())}"
        )
    return _REGISTRY[name]


def attention_options(name: str) -> dict[str, Any]:
    """The YAML-settable options of a backend with their defaults (``head_dim`` excluded)."""
    params = inspect.signature(attention_class(name).__init__).parameters
    return {
        p.name: p.default
        for p in params.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "head_dim"
    }


def build_attention(name: str, *, head_dim: int, **options: Any) -> Attention:
    """Build the backend registered as ``name``.

    Args:
        name: a registry name, see ``available_attentions()``.
        head_dim: per-head query/key size D, given by the model.
        **options: backend tunables (e.g. ``num_features`` for performer), usually from YAML.

    Raises:
        ValueError: unknown name or option, naming what is allowed.
    """
    cls = attention_class(name)
    allowed = attention_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        listed = ", ".join(f"{k} (default {v!r})" for k, v in allowed.items()) or "none"
        raise ValueError(
            f"unknown option(s) {', '.join(map(repr, unknown))} for attention {name!r}; "
            f"allowed: {listed}"
        )
    return cls(head_dim=head_dim, **options)
