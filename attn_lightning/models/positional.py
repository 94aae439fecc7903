"""Positional encodings added to token embeddings: fixed sinusoidal, learned, or none.

``rotary`` adds nothing here either: the positions enter every self-attention, which turns its
queries and keys by them (``attention.ops.rotary``).

The first two map ``x: (B, L, E)`` to ``x + P[offset : offset + L]``; ``offset`` lets incremental
decoding add the encoding of the position being generated. ``none`` adds nothing (NoPE): a causal
model then knows order only through its mask (and a short convolution, ``net.short_conv``), as
Zoology's non-attention models (``max_position_embeddings=0``) and every model of Based's MQAR
figure.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


class _PositionTable(nn.Module):
    """Adds rows ``offset .. offset + L`` of ``table: (max_len, E)`` to ``x: (B, L, E)``."""

    table: Tensor  # (T, E)

    def __init__(self, d_model: int, *, max_len: int) -> None:
        super().__init__()
        if d_model <= 0 or max_len <= 0:
            raise ValueError(f"d_model and max_len must be positive, got {d_model} and {max_len}")
        self.max_len = max_len

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        length = x.shape[1]
        if offset + length > self.max_len:
            raise ValueError(
                f"positions {offset}..{offset + length - 1} exceed max_len={self.max_len}; "
                f"raise the model's max_len"
            )
        return x + self.table[offset : offset + length].to(x.dtype)  # (L, E), broadcast over B


class SinusoidalPositionalEncoding(_PositionTable):
    """``P[t, 2i] = sin(t / 10000^{2i/E})``, ``P[t, 2i+1] = cos(...)`` (Vaswani et al. 2017).

    The table is a non-persistent buffer: it is a function of (max_len, E), not a weight, so
    checkpoints do not depend on ``max_len``.
    """

    def __init__(self, d_model: int, *, max_len: int) -> None:
        super().__init__(d_model, max_len=max_len)
        position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (T, 1)
        freq = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))  # (E/2,)
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(position * freq)
        table[:, 1::2] = torch.cos(position * freq[: d_model // 2])
        self.register_buffer("table", table, persistent=False)  # (T, E)


class LearnedPositionalEncoding(_PositionTable):
    """A trained table ``P: (max_len, E)``, initialised N(0, 0.02²) as in GPT-2."""

    def __init__(self, d_model: int, *, max_len: int) -> None:
        super().__init__(d_model, max_len=max_len)
        self.table = nn.Parameter(torch.randn(max_len, d_model) * 0.02)  # (T, E)


class NoPositionalEncoding(nn.Module):
    """Adds nothing, at any length and offset (``positional: none``)."""

    def __init__(self, d_model: int, *, max_len: int) -> None:
        super().__init__()
        if d_model <= 0 or max_len <= 0:
            raise ValueError(f"d_model and max_len must be positive, got {d_model} and {max_len}")

    def forward(self, x: Tensor, *, offset: int = 0) -> Tensor:
        return x


POSITIONAL_ENCODINGS: dict[str, type[nn.Module]] = {
    "sinusoidal": SinusoidalPositionalEncoding,
    "learned": LearnedPositionalEncoding,
    "rotary": NoPositionalEncoding,  # the attention layers turn q and k instead
    "none": NoPositionalEncoding,
}


def build_positional_encoding(kind: str, d_model: int, *, max_len: int) -> nn.Module:
    """``kind`` is a key of ``POSITIONAL_ENCODINGS``; raises ValueError naming the allowed ones."""
    if kind not in POSITIONAL_ENCODINGS:
        raise ValueError(
            f"unknown positional encoding {kind!r}; allowed: {', '.join(POSITIONAL_ENCODINGS)}"
        )
    return POSITIONAL_ENCODINGS[kind](d_model, max_len=max_len)
