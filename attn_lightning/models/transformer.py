"""Multi-head attention around any backend, pre-norm blocks and encoder/decoder stacks.

Shape notation (as in ``attention/base.py``)::

    B batch   L query length   S key/value length   E d_model   H heads   D head_dim = E / H

The backend only mixes values (``(B, H, L, D)`` in, ``(B, H, L, D)`` out); projections, head
split/merge, norms and residuals live here (fast-transformers ``attention_layer.py`` layout).
Masks follow the one polarity of the project: ``key_padding_mask`` is ``(B, S)`` bool, True = real
token.

Incremental decoding: every ``step`` takes one position ``(B, 1, E)`` and the state the previous
call returned (None at the first position) and returns ``(output, state)``; nothing is cached on
the module, so one model can decode several batches at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attn_lightning.attention import State, build_attention

LayerState = tuple[State | None, ...]


class MultiHeadAttention(nn.Module):
    """Project, split heads, mix with the backend, merge heads, project back.

    ``out = W_o · concat_h backend(W_q x_q, W_k x_k, W_v x_v)_h``; cost = backend cost + O(N·E²).

    Args:
        d_model: E.
        num_heads: H; E must be divisible by H.
        attention: backend dict, ``{"name": "performer", "num_features": 128}``.
        projections: with False there are no q/k/v/out projections: q, k, v are the inputs split
            into heads (the "no trainable Q/K/V" setting of optimization-based attention).
        bias: bias in the projections.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        attention: Mapping[str, Any],
        *,
        projections: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if num_heads <= 0 or d_model % num_heads:
            raise ValueError(
                f"d_model ({d_model}) must be a positive multiple of num_heads ({num_heads})"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.projections = projections
        self.backend = build_attention(attention, head_dim=self.head_dim)
        if projections:
            # Separate Linear layers (not one fused qkv) so LoRA can target q_proj / v_proj.
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.k_proj = nn.Linear(d_model, d_model, bias=bias)
            self.v_proj = nn.Linear(d_model, d_model, bias=bias)
            self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    @property
    def supports_recurrence(self) -> bool:
        return self.backend.supports_recurrence

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, D)

    def _merge(self, x: Tensor) -> Tensor:
        b, _, n, _ = x.shape
        return x.transpose(1, 2).reshape(b, n, self.d_model)  # (B, N, E)

    def _qkv(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.projections:
            query, key, value = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        return self._split(query), self._split(key), self._split(value)

    def _out(self, mixed: Tensor) -> Tensor:
        out = self._merge(mixed)  # (B, L, E)
        return self.out_proj(out) if self.projections else out

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
    ) -> Tensor:
        """``query: (B, L, E)``, ``key: (B, S, E)`` (default query), ``value`` (default key)."""
        key = query if key is None else key
        value = key if value is None else value
        q, k, v = self._qkv(query, key, value)  # (B, H, L, D), (B, H, S, D), (B, H, S, D)
        mixed = self.backend(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        return self._out(mixed)  # (B, L, E)

    def step(self, x: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """Causal self-attention for one new position ``x: (B, 1, E)`` -> ``((B, 1, E), state)``.

        Raises:
            NotImplementedError: the backend has no recurrent form (decode by prefix recompute).
        """
        q, k, v = self._qkv(x, x, x)  # each (B, H, 1, D)
        mixed, state = self.backend.step(q, k, v, state)  # (B, H, 1, D)
        return self._out(mixed), state


class FeedForward(nn.Sequential):
    """Position-wise MLP ``W_2 · act(W_1 x)``, O(N·E·F)."""

    def __init__(self, d_model: int, d_ff: int, *, dropout: float = 0.0) -> None:
        super().__init__(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )


def _with_pos(x: Tensor, pos: Tensor | None) -> Tensor:
    # DETR adds positional encodings to queries and keys at every layer, never to values.
    return x if pos is None else x + pos


class EncoderBlock(nn.Module):
    """Pre-norm block: ``x += attn(LN x)``; ``x += mlp(LN x)``. Causal or not per call."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        attention: Mapping[str, Any],
        *,
        d_ff: int,
        dropout: float = 0.0,
        projections: bool = True,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(d_model, num_heads, attention, projections=projections)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model, d_ff, dropout=dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        pos: Tensor | None = None,
    ) -> Tensor:
        h = self.norm1(x)  # (B, L, E)
        qk = _with_pos(h, pos)
        x = x + self.dropout(self.attn(qk, qk, h, causal=causal, key_padding_mask=key_padding_mask))
        return x + self.dropout(self.mlp(self.norm2(x)))

    def step(self, x: Tensor, state: State | None = None) -> tuple[Tensor, State]:
        """One causal position ``(B, 1, E)``; equals ``forward(causal=True)`` at that position."""
        h, state = self.attn.step(self.norm1(x), state)
        x = x + h
        return x + self.mlp(self.norm2(x)), state


class DecoderBlock(nn.Module):
    """Pre-norm block with cross-attention: self-attn, then attend to ``memory``, then MLP."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        attention: Mapping[str, Any],
        *,
        d_ff: int,
        dropout: float = 0.0,
        projections: bool = True,
        cross_attention: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads, attention, projections=projections)
        self.norm2 = nn.LayerNorm(d_model)
        cross = attention if cross_attention is None else cross_attention
        self.cross_attn = MultiHeadAttention(d_model, num_heads, cross, projections=projections)
        self.norm3 = nn.LayerNorm(d_model)
        self.mlp = FeedForward(d_model, d_ff, dropout=dropout)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        pos: Tensor | None = None,
        query_pos: Tensor | None = None,
    ) -> Tensor:
        """``x: (B, L, E)``, ``memory: (B, S, E)``; ``pos`` is memory's, ``query_pos`` x's."""
        h = self.norm1(x)
        qk = _with_pos(h, query_pos)
        x = x + self.dropout(
            self.self_attn(qk, qk, h, causal=causal, key_padding_mask=key_padding_mask)
        )
        h = self.norm2(x)
        x = x + self.dropout(
            self.cross_attn(
                _with_pos(h, query_pos),
                _with_pos(memory, pos),
                memory,
                key_padding_mask=memory_key_padding_mask,
            )
        )
        return x + self.dropout(self.mlp(self.norm3(x)))


class TransformerEncoder(nn.Module):
    """A stack of ``EncoderBlock``s and a final LayerNorm; causal=True makes it a decoder-only LM.

    Args:
        num_layers, d_model, num_heads, d_ff, dropout, projections: as in the blocks.
        attention: backend dict shared by all layers.
    """

    def __init__(
        self,
        *,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        attention: Mapping[str, Any],
        dropout: float = 0.0,
        projections: bool = True,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            EncoderBlock(
                d_model, num_heads, attention, d_ff=d_ff, dropout=dropout, projections=projections
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)

    @property
    def supports_recurrence(self) -> bool:
        return all(layer.attn.supports_recurrence for layer in self.layers)

    def forward(
        self,
        x: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        pos: Tensor | None = None,
    ) -> Tensor:
        for layer in self.layers:
            x = layer(x, causal=causal, key_padding_mask=key_padding_mask, pos=pos)
        return self.norm(x)  # (B, L, E)

    def step(self, x: Tensor, state: LayerState | None = None) -> tuple[Tensor, LayerState]:
        """One causal position through every layer; ``state`` holds one entry per layer."""
        state = state if state is not None else (None,) * len(self.layers)
        new_state = []
        for layer, layer_state in zip(self.layers, state, strict=True):
            x, layer_state = layer.step(x, layer_state)
            new_state.append(layer_state)
        return self.norm(x), tuple(new_state)


class TransformerDecoder(nn.Module):
    """A stack of ``DecoderBlock``s (DETR-style when ``return_intermediate``).

    Returns ``(B, L, E)``, or ``(num_layers, B, L, E)`` normed outputs of every layer with
    ``return_intermediate=True`` (for auxiliary losses).
    """

    def __init__(
        self,
        *,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        attention: Mapping[str, Any],
        cross_attention: Mapping[str, Any] | None = None,
        dropout: float = 0.0,
        projections: bool = True,
        return_intermediate: bool = False,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1 for a decoder, got {num_layers}")
        self.layers = nn.ModuleList(
            DecoderBlock(
                d_model,
                num_heads,
                attention,
                d_ff=d_ff,
                dropout=dropout,
                projections=projections,
                cross_attention=cross_attention,
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.return_intermediate = return_intermediate

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        memory_key_padding_mask: Tensor | None = None,
        pos: Tensor | None = None,
        query_pos: Tensor | None = None,
    ) -> Tensor:
        """Arguments as in ``DecoderBlock.forward``."""
        outputs = []
        for layer in self.layers:
            x = layer(
                x,
                memory,
                causal=causal,
                key_padding_mask=key_padding_mask,
                memory_key_padding_mask=memory_key_padding_mask,
                pos=pos,
                query_pos=query_pos,
            )
            if self.return_intermediate:
                outputs.append(self.norm(x))
        if self.return_intermediate:
            return torch.stack(outputs)  # (num_layers, B, L, E)
        return self.norm(x)
