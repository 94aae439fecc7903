"""Attention backends behind one contract; see ``base.py`` for shapes and mask polarity."""

from attn_lightning.attention.base import (
    Attention,
    Grid,
    State,
    check_finite,
    check_finite_enabled,
    set_check_finite,
)
from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.registry import (
    ATTENTIONS,
    attention_class,
    attention_options,
    available_attentions,
    build_attention,
    parse_attention_spec,
    register_attention,
    resolve_attention,
)

__all__ = [
    "ATTENTIONS",
    "Attention",
    "FeatureMapAttention",
    "Grid",
    "State",
    "attention_class",
    "attention_options",
    "available_attentions",
    "build_attention",
    "check_finite",
    "check_finite_enabled",
    "parse_attention_spec",
    "register_attention",
    "resolve_attention",
    "set_check_finite",
]
