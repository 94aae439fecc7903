"""Multi-head attention around any backend, and the pre-norm blocks every model is built from.

Shape notation (as in ``attention/base.py``)::

    B batch   L query length   S key/value length   E d_model   H heads   D head_dim (E / H)

Attention sites are ``models.multihead.MultiHeadAttention`` (projections, short convolutions,
heads around a backend); norms and residuals live here.
Masks follow the one polarity of the project: ``key_padding_mask`` is ``(B, S)`` bool, True = real
token. Image models pass their token map per call, ``grid=(rows, cols)``, down to the backend
(``pool`` windows over it; the others ignore it).

One set of blocks serves every model: ``TransformerEncoder`` stacks ``EncoderBlock``s for the
sequence and pixel models; DETR stacks ``EncoderBlock``s and ``DecoderBlock``s itself, passing
positional encodings (``pos``, ``query_pos``) that are added to queries and keys at every layer,
and one backend dict and projections choice per attention site.

Incremental decoding: every ``step`` takes one position ``(B, 1, E)`` and the state the previous
call returned (None at the first position) and returns ``(output, state)``; nothing is cached on
the module, so one model can decode several batches at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from torch import Tensor, nn

from attn_lightning.attention import Grid, State
from attn_lightning.models.hybrid import layer_attentions
from attn_lightning.models.multihead import MultiHeadAttention, Projections

LayerState = tuple[State | None, ...]


@dataclass(frozen=True)
class BlockSizes:
    """The sizes every block of a stack shares (the specs of ``models.specs`` extend it).

    Attributes:
        d_model: E, the width of every token.
        num_heads: H; E must be a multiple of H when ``head_dim`` is None.
        d_ff: hidden width of each block's feed-forward; 0: none, attention-only blocks (the
            ablation of Zoology's MQAR models and of Olsson et al.'s induction-head models).
        dropout: on the feed-forward's hidden layer and on each residual branch.
        head_dim: D, each attention head's width (None: E / H); the projections map E to H·D
            and back (``MultiHeadAttention``), so a head's features and state are set apart
            from the model's width.
    """

    d_model: int = 64
    num_heads: int = 4
    d_ff: int = 256
    dropout: float = 0.0
    head_dim: int | None = None


class FeedForward(nn.Sequential):
    """Position-wise MLP ``W_2 · act(W_1 x)``, O(N·E·F); ValueError for ``d_ff < 1``."""

    def __init__(self, *, d_model: int, d_ff: int, dropout: float = 0.0) -> None:
        if d_ff <= 0:
            raise ValueError(f"d_ff must be >= 1, got {d_ff}")
        super().__init__(
            nn.Linear(d_model, d_ff), nn.GELU(), nn.Dropout(dropout), nn.Linear(d_ff, d_model)
        )


def _feed_forward(sizes: BlockSizes) -> tuple[nn.LayerNorm | None, FeedForward | None]:
    """A block's pre-norm and MLP, or (None, None) for ``d_ff = 0`` (attention-only)."""
    if sizes.d_ff == 0:
        return None, None
    e = sizes.d_model
    return nn.LayerNorm(e), FeedForward(d_model=e, d_ff=sizes.d_ff, dropout=sizes.dropout)


def _with_pos(x: Tensor, pos: Tensor | None) -> Tensor:
    # DETR adds positional encodings to queries and keys at every layer, never to values.
    return x if pos is None else x + pos


class EncoderBlock(nn.Module):
    """Pre-norm block: ``x += attn(LN x + pos, LN x + pos, LN x)``; ``x += mlp(LN x)``.

    Causal or not per call; ``pos`` (DETR's encoder) is optional.

    Args:
        sizes: d_model, num_heads, d_ff (the MLP's hidden width) and dropout (``BlockSizes``).
        attention, projections, short_conv, rotary: the self-attention's backend, projections,
            short convolution and rotary positions (``MultiHeadAttention``).
    """

    def __init__(
        self,
        sizes: BlockSizes,
        *,
        attention: Mapping[str, Any],
        projections: Projections = True,
        short_conv: int = 0,
        rotary: float | None = None,
    ) -> None:
        super().__init__()
        e = sizes.d_model
        self.norm1 = nn.LayerNorm(e)
        self.attn = MultiHeadAttention(
            d_model=e,
            num_heads=sizes.num_heads,
            attention=attention,
            projections=projections,
            short_conv=short_conv,
            head_dim=sizes.head_dim,
            rotary=rotary,
        )
        self.norm2, self.mlp = _feed_forward(sizes)
        self.dropout = nn.Dropout(sizes.dropout)

    def forward(
        self,
        x: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        pos: Tensor | None = None,
        grid: Grid | None = None,
    ) -> Tensor:
        """``x: (B, L, E)``, ``pos``: broadcastable to it, or None -> ``(B, L, E)``.

        ``grid``: ``(rows, cols)`` of the L tokens on a 2-D map (for positional backends).
        """
        h = self.norm1(x)  # (B, L, E)
        qk = _with_pos(h, pos)
        mixed = self.attn(qk, qk, h, causal=causal, key_padding_mask=key_padding_mask, grid=grid)
        x = x + self.dropout(mixed)
        if self.mlp is None or self.norm2 is None:
            return x
        return x + self.dropout(self.mlp(self.norm2(x)))

    def step(
        self, x: Tensor, state: State | None = None, *, offset: int = 0
    ) -> tuple[Tensor, State]:
        """One causal position ``(B, 1, E)``, the ``offset``-th; equals ``forward(causal=True)``
        at that position."""
        h, state = self.attn.step(self.norm1(x), state, offset=offset)
        x = x + h
        if self.mlp is None or self.norm2 is None:
            return x, state
        return x + self.mlp(self.norm2(x)), state


class DecoderBlock(nn.Module):
    """Pre-norm block: self-attention, cross-attention to ``memory``, MLP (DETR's decoder layer).

    ``x += self_attn(LN x + qp, LN x + qp, LN x)``; ``x += cross_attn(LN x + qp, m + pos, m)``;
    ``x += mlp(LN x)``, with ``qp`` the queries' positions and ``pos`` the memory's.

    Args:
        sizes: d_model and num_heads of both attentions, d_ff and dropout (``BlockSizes``).
        attention, projections: backend dict and projections choice of the self-attention.
        cross_attention, cross_projections: the same for the cross-attention.
    """

    def __init__(
        self,
        sizes: BlockSizes,
        *,
        attention: Mapping[str, Any],
        cross_attention: Mapping[str, Any],
        projections: Projections = True,
        cross_projections: Projections = True,
    ) -> None:
        super().__init__()
        e, h, d = sizes.d_model, sizes.num_heads, sizes.head_dim
        self.norm1 = nn.LayerNorm(e)
        self.self_attn = MultiHeadAttention(
            d_model=e, num_heads=h, head_dim=d, attention=attention, projections=projections
        )
        self.norm2 = nn.LayerNorm(e)
        self.cross_attn = MultiHeadAttention(
            d_model=e,
            num_heads=h,
            head_dim=d,
            attention=cross_attention,
            projections=cross_projections,
        )
        self.norm3, self.mlp = _feed_forward(sizes)
        self.dropout = nn.Dropout(sizes.dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        *,
        pos: Tensor | None = None,
        query_pos: Tensor | None = None,
    ) -> Tensor:
        """``x: (B, L, E)``, ``memory: (B, S, E)`` -> ``(B, L, E)``; ``pos``: memory's positions."""
        h = self.norm1(x)  # (B, L, E)
        qk = _with_pos(h, query_pos)
        x = x + self.dropout(self.self_attn(qk, qk, h))
        h = self.norm2(x)
        x = x + self.dropout(
            self.cross_attn(_with_pos(h, query_pos), _with_pos(memory, pos), memory)
        )
        if self.mlp is None or self.norm3 is None:
            return x
        return x + self.dropout(self.mlp(self.norm3(x)))


class TransformerEncoder(nn.Module):
    """A stack of ``EncoderBlock``s and a final LayerNorm; causal=True makes it a decoder-only LM.

    Args:
        sizes: every block's sizes (``BlockSizes``; a ``TransformerSpec`` is one).
        num_layers: number of blocks (0 leaves only the final norm).
        attention: backend dict of every layer; its ``layers`` key gives some layers their own
            (a hybrid stack, ``models.hybrid``).
        projections: the projections of every layer.
        short_conv: K of every layer's short convolution on q, k, v (0: none).
        rotary: the base of the rotary positions every layer turns its q and k by
            (``attention.ops.rotary``); None: none.

    Raises:
        ValueError: a negative ``num_layers``, a bad size (from the blocks), or a ``layers`` entry
            naming a layer the stack does not have.
    """

    def __init__(
        self,
        sizes: BlockSizes,
        *,
        num_layers: int,
        attention: Mapping[str, Any],
        projections: Projections = True,
        short_conv: int = 0,
        rotary: float | None = None,
    ) -> None:
        super().__init__()
        if num_layers < 0:
            raise ValueError(f"num_layers must be >= 0, got {num_layers}")
        self.layers = nn.ModuleList(
            EncoderBlock(
                sizes,
                attention=layer,
                projections=projections,
                short_conv=short_conv,
                rotary=rotary,
            )
            for layer in layer_attentions(attention, num_layers=num_layers)
        )
        self.norm = nn.LayerNorm(sizes.d_model)

    @property
    def supports_recurrence(self) -> bool:
        return all(
            m.supports_recurrence for m in self.modules() if isinstance(m, MultiHeadAttention)
        )

    def state_sizes(self, *, seq_len: int) -> tuple[int, ...]:
        """Floats each layer keeps to decode after ``seq_len`` tokens, per batch row: its heads'
        backend states (``Attention.state_size`` × H, Dv = head_dim) and its short convolution's
        cache (``MultiHeadAttention.state_size``).

        Raises:
            NotImplementedError: a layer whose backend has no recurrent step.
        """
        return tuple(
            cast(EncoderBlock, layer).attn.state_size(seq_len=seq_len) for layer in self.layers
        )

    def forward(
        self,
        x: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        grid: Grid | None = None,
    ) -> Tensor:
        """``x: (B, L, E)`` -> ``(B, L, E)``; ``grid``: the tokens' ``(rows, cols)`` map or None."""
        for layer in self.layers:
            x = layer(x, causal=causal, key_padding_mask=key_padding_mask, grid=grid)
        return self.norm(x)  # (B, L, E)

    def step(
        self, x: Tensor, state: LayerState | None = None, *, offset: int = 0
    ) -> tuple[Tensor, LayerState]:
        """One causal position, the ``offset``-th, through every layer; ``state`` holds one entry
        per layer."""
        state = state if state is not None else (None,) * len(self.layers)
        new_state = []
        for layer, layer_state in zip(self.layers, state, strict=True):
            x, layer_state = cast(EncoderBlock, layer).step(x, layer_state, offset=offset)
            new_state.append(layer_state)
        return self.norm(x), tuple(new_state)
