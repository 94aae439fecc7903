"""Attention backends behind one contract; see ``base.py`` for shapes and mask polarity."""

# Importing a backend module registers it; the registry is the one table of names.
from attn_lightning.attention import (  # noqa: F401
    linear,
    mean,
    optimization,
    performer,
    polynomial,
    softmax,
)
from attn_lightning.attention.base import Attention, State
from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.registry import (
    attention_class,
    attention_options,
    available_attentions,
    build_attention,
    parse_attention_spec,
    register_attention,
)

__all__ = [
    "Attention",
    "FeatureMapAttention",
    "State",
    "attention_class",
    "attention_options",
    "available_attentions",
    "build_attention",
    "parse_attention_spec",
    "register_attention",
]
