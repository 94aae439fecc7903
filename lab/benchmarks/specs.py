"""Backend specs on the command line: ``name[:key=value,key=value]``.

    softmax                                   -> ("softmax", {})
    performer:num_features=128,kernel=hyperbolic
    polysketch:sketch=learned,sketch_size=32

Values are parsed by ``attention.parse_attention_spec`` (YAML scalars). Unknown names and options
fail here, before anything is timed, with the allowed ones listed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attn_lightning.attention import (
    Attention,
    attention_options,
    available_attentions,
    build_attention,
    parse_attention_spec,
)


@dataclass(frozen=True)
class BackendSpec:
    """A backend as named on the command line: ``label`` is the spec string itself."""

    label: str
    name: str
    options: dict[str, Any] = field(default_factory=dict)

    def build(self, *, head_dim: int) -> Attention:
        return build_attention(self.name, head_dim=head_dim, **self.options)


def parse_backend(spec: str) -> BackendSpec:
    """Parse ``name[:key=value,...]`` and check the name and option keys against the registry.

    The label stays the spec as written.

    Raises:
        ValueError: unknown backend, malformed ``key=value`` item or unknown option, naming the
            allowed values.
    """
    options = parse_attention_spec(spec)
    name = options.pop("name")
    if name not in available_attentions():
        raise ValueError(
            f"unknown backend {name!r} in {spec!r}; available: {', '.join(available_attentions())}"
        )
    allowed = attention_options(name)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option {', '.join(map(repr, unknown))} for backend {name!r} in {spec!r}; "
            f"allowed: {', '.join(allowed) or 'none'}"
        )
    return BackendSpec(label=spec.strip(), name=name, options=options)
