"""Backend specs on the command line: ``name[:key=value,key=value]``.

    softmax                                   -> ("softmax", {})
    performer:num_features=128,kernel=hyperbolic
    polynomial:form=sketch,sketch_size=32

Values are parsed as bool (true/false), None (none), int, float, else kept as strings. Unknown
names and options fail here, before anything is timed, with the allowed ones listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attn_lightning.attention import (
    Attention,
    attention_options,
    available_attentions,
    build_attention,
)


@dataclass(frozen=True)
class BackendSpec:
    """A backend as named on the command line: ``label`` is the spec string itself."""

    label: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, *, head_dim: int) -> Attention:
        return build_attention(self.name, head_dim=head_dim, **self.options)


def parse_value(raw: str) -> Any:
    """``"true"`` -> True, ``"none"`` -> None, ``"3"`` -> 3, ``"0.5"`` -> 0.5, else the string."""
    lowered = raw.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    if lowered == "none":
        return None
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


def parse_backend(spec: str) -> BackendSpec:
    """Parse ``name[:key=value,...]`` and check the name and option keys against the registry.

    Raises:
        ValueError: unknown backend, malformed ``key=value`` item or unknown option, naming the
            allowed values.
    """
    name, _, rest = spec.strip().partition(":")
    if name not in available_attentions():
        raise ValueError(
            f"unknown backend {name!r} in {spec!r}; available: {', '.join(available_attentions())}"
        )
    allowed = attention_options(name)
    options: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ValueError(f"bad backend option {item!r} in {spec!r}: expected key=value")
        if key not in allowed:
            raise ValueError(
                f"unknown option {key!r} for backend {name!r} in {spec!r}; "
                f"allowed: {', '.join(allowed) or 'none'}"
            )
        options[key] = parse_value(raw)
    return BackendSpec(label=spec.strip(), name=name, options=options)
