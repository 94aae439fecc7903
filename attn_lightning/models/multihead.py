"""Multi-head attention around any backend: project, (convolve), split heads, mix, merge, project.

Shape notation (as in ``attention/base.py``)::

    B batch   L query length   S key/value length   E d_model   H heads
    D head_dim (E / H unless given)   I = H·D, the width the heads are cut from

The backend only mixes values (``(B, H, L, D)`` in, ``(B, H, L, D)`` out); projections, the short
convolution and head split/merge live here (fast-transformers ``attention_layer.py`` layout), norms
and residuals in the blocks of ``models.transformer``.

Projections (``projections``): ``True`` all four (Q, K, V, out); ``"no_qk"`` only V and out, q and
k being the inputs split into heads (the form of optimization-based attention, "without the need
for explicit Q and K projection matrices"); ``False`` none (q, k, v are all the inputs).

Short convolutions (``short_conv``: K, 0 = none): a causal depthwise convolution of kernel K and
SiLU on q, k and v after their projections (``models.short_conv``; GLA's and DeltaNet's
``use_short_conv``), for self-attention; the decode state then also holds the last K - 1
projected inputs.

Rotary positions (``rotary``: their base, None = none): q and k of every head turned by their
positions after the projections and the convolution (``attention.ops.rotary``), for
self-attention; ``step`` takes the position of its token as ``offset``.

Head width (``head_dim``: D, None = E / H): the projections map E to H·D and back, so the heads'
width — the features a feature map gets and the state each head keeps — is set apart from the
model's width (Zoology and Based vary the feature dimension at a fixed model width). Without
projections the heads are cut from the inputs, so H·D must equal E.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch import Tensor, nn

from attn_lightning.attention import Grid, State, build_attention
from attn_lightning.attention.ops.rotary import check_rotary_base, check_rotary_width, turn
from attn_lightning.models.short_conv import ShortConvolution

# Which projections a MultiHeadAttention has: True (Q, K, V, out), "no_qk" (V, out), False (none).
Projections = bool | Literal["no_qk"]


def check_projections(projections: object) -> Projections:
    """``projections`` itself if allowed (see the module docstring), else a ValueError naming it."""
    if isinstance(projections, bool) or projections == "no_qk":
        return projections
    raise ValueError(
        f"projections must be true or false (all or none of Q, K, V, out) or 'no_qk' (V and out "
        f"only, no Q and K), got {projections!r}"
    )


class MultiHeadAttention(nn.Module):
    """Project, split heads, mix with the backend, merge heads, project back.

    ``out = W_o · concat_h backend(W_q x_q, W_k x_k, W_v x_v)_h``; cost = backend cost + O(N·E²).

    Args:
        d_model: E.
        num_heads: H; E must be a positive multiple of H when ``head_dim`` is None.
        head_dim: D, each head's width (None: E / H); the q, k, v projections map E to H·D and
            the output projection H·D back to E. Without Q and K projections (``no_qk``,
            ``False``) H·D must equal E.
        attention: backend dict, ``{"name": "performer", "num_features": 128}``.
        projections: ``True`` (q/k/v/out projections), ``"no_qk"`` (v and out only: q and k are
            the inputs split into heads, as in optimization-based attention) or ``False`` (none:
            q, k, v are the inputs split into heads).
        bias: bias in the projections.
        short_conv: K of a short causal convolution on q, k, v (0: none; self-attention only:
            a call whose keys are not as long as its queries is refused).
        rotary: the base of rotary positions, which turn q and k by their positions (RoPE,
            ``attention.ops.rotary``; RoFormer's base is 10000; self-attention only, and an
            even ``head_dim``); None: none.

    Raises:
        ValueError: ``d_model``, ``num_heads`` or ``head_dim`` not positive, ``d_model %
            num_heads != 0`` with no ``head_dim``, or H·D ≠ E without Q and K projections;
            ``projections`` not one of the three; ``short_conv`` < 0; an unknown backend name or
            option (from ``build_attention``); ``rotary`` not > 1, or with an odd head width.
    """

    def __init__(
        self,
        *,
        d_model: int,
        num_heads: int,
        attention: Mapping[str, Any],
        projections: Projections = True,
        bias: bool = True,
        short_conv: int = 0,
        head_dim: int | None = None,
        rotary: float | None = None,
    ) -> None:
        super().__init__()
        if short_conv < 0:
            raise ValueError(
                f"short_conv must be >= 0 (0: none, else its kernel), got {short_conv}"
            )
        if head_dim is not None and head_dim <= 0:
            raise ValueError(
                f"head_dim must be >= 1 (or None: d_model / num_heads), got {head_dim}"
            )
        if d_model <= 0 or num_heads <= 0 or (head_dim is None and d_model % num_heads):
            raise ValueError(
                f"d_model ({d_model}) must be a positive multiple of num_heads ({num_heads})"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads if head_dim is None else head_dim
        self.inner_dim = num_heads * self.head_dim  # I: the width q, k, v are cut into heads from
        self.projections = check_projections(projections)
        if self.projections is not True and self.inner_dim != d_model:
            raise ValueError(
                f"head_dim {self.head_dim} × num_heads {num_heads} = {self.inner_dim} must equal "
                f"d_model ({d_model}) with projections={self.projections!r}: without Q and K "
                f"projections the heads are cut from the inputs (set projections true, or "
                f"head_dim to {d_model // num_heads if d_model % num_heads == 0 else 'None'})"
            )
        self.backend = build_attention(attention, head_dim=self.head_dim)
        # Separate Linear layers (not one fused qkv) so LoRA can target q_proj / v_proj; created
        # in this order (q, k, v, out) so True keeps its parameter init and state-dict keys.
        self.q_proj: nn.Linear | None = None
        self.k_proj: nn.Linear | None = None
        self.v_proj: nn.Linear | None = None
        self.out_proj: nn.Linear | None = None
        inner = self.inner_dim
        if self.projections is True:
            self.q_proj = nn.Linear(d_model, inner, bias=bias)
            self.k_proj = nn.Linear(d_model, inner, bias=bias)
        if self.projections is not False:
            self.v_proj = nn.Linear(d_model, inner, bias=bias)
            self.out_proj = nn.Linear(inner, d_model, bias=bias)
        # One depthwise convolution over q, k and v side by side: each channel is its own filter,
        # so this is fla's three ShortConvolutions in one call.
        self.conv = ShortConvolution(3 * inner, short_conv) if short_conv else None
        if rotary is not None:
            rotary = check_rotary_base(rotary, option="rotary")
            check_rotary_width(self.head_dim)
            if getattr(self.backend, "rotary", False):
                raise ValueError(
                    f"rotary positions twice: net.positional rotary turns q and k before attention "
                    f"{self.backend.name!r}, whose rotary: true turns its features (RoFormer's "
                    f"linear form); keep one (net.positional none, or the backend's rotary: false)"
                )
        self.rotary = rotary

    @property
    def supports_recurrence(self) -> bool:
        return self.backend.supports_recurrence

    def _split(self, x: Tensor) -> Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.num_heads, self.head_dim).transpose(1, 2)  # (B, H, N, D)

    def _merge(self, x: Tensor) -> Tensor:
        b, _, n, _ = x.shape
        return x.transpose(1, 2).reshape(b, n, self.inner_dim)  # (B, N, I)

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.q_proj is not None and self.k_proj is not None:
            query, key = self.q_proj(query), self.k_proj(key)
        if self.v_proj is not None:
            value = self.v_proj(value)
        return query, key, value  # (B, L, I), (B, S, I), (B, S, I)

    def _qkv(
        self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor, Tensor]:
        q, k, v = self._project(query, key, value)
        for name, used in (("short_conv", self.conv), ("rotary", self.rotary)):
            if used is not None and q.shape[1] != k.shape[1]:
                raise ValueError(
                    f"{name} is for self-attention: got {q.shape[1]} queries and {k.shape[1]} keys"
                )
        if self.conv is not None:
            mixed = self.conv(torch.cat([q, k, v], dim=-1), key_padding_mask)
            q, k, v = mixed.split(self.inner_dim, dim=-1)
        return self._turn(self._split(q), self._split(k), self._split(v))

    def _turn(
        self, q: Tensor, k: Tensor, v: Tensor, *, offset: int = 0
    ) -> tuple[Tensor, Tensor, Tensor]:
        """q and k turned by their positions from ``offset`` on (with ``rotary``), v as it is."""
        if self.rotary is None:
            return q, k, v
        q, k = turn(q, k, offset=offset, base=self.rotary)
        return q, k, v

    def _out(self, mixed: Tensor) -> Tensor:
        out = self._merge(mixed)  # (B, L, I)
        return out if self.out_proj is None else self.out_proj(out)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        grid: Grid | None = None,
    ) -> Tensor:
        """``query: (B, L, E)``, ``key: (B, S, E)`` (default query), ``value`` (default key).

        ``grid``: ``(rows, cols)`` of the S key tokens on a 2-D map, passed to the backend.
        """
        key = query if key is None else key
        value = key if value is None else value
        q, k, v = self._qkv(query, key, value, key_padding_mask)  # (B, H, L|S|S, D)
        mixed = self.backend(q, k, v, causal=causal, key_padding_mask=key_padding_mask, grid=grid)
        return self._out(mixed)  # (B, L, E)

    def step(
        self, x: Tensor, state: State | None = None, *, offset: int = 0
    ) -> tuple[Tensor, State]:
        """Causal self-attention for one new position ``x: (B, 1, E)`` -> ``((B, 1, E), state)``.

        ``offset``: the position of ``x`` (the tokens before it), which ``rotary`` turns q and k
        by. With ``short_conv`` the state is ``(the backend's state..., the convolution's
        cache)``.

        Raises:
            NotImplementedError: the backend has no recurrent form (decode by prefix recompute).
        """
        if self.conv is None:
            q, k, v = self._turn(*map(self._split, self._project(x, x, x)), offset=offset)
            mixed, state = self.backend.step(q, k, v, state)  # (B, H, 1, D)
            return self._out(mixed), state
        backend_state, cache = (None, None) if state is None else (state[:-1], state[-1])
        qkv, cache = self.conv.step(torch.cat(self._project(x, x, x), dim=-1), cache)
        q, k, v = self._turn(*map(self._split, qkv.split(self.inner_dim, dim=-1)), offset=offset)
        mixed, backend_state = self.backend.step(q, k, v, backend_state)
        return self._out(mixed), (*backend_state, cache)

    def state_size(self, *, seq_len: int) -> int:
        """Floats ``step`` keeps per batch row after ``seq_len`` tokens: every head's backend
        state (``Attention.state_size``, Dv = head_dim) and the short convolution's cache.

        Raises:
            NotImplementedError: the backend has no recurrent step.
        """
        per_head = self.backend.state_size(seq_len=seq_len, value_dim=self.head_dim)
        return self.num_heads * per_head + (0 if self.conv is None else self.conv.state_size())


__all__ = ["MultiHeadAttention", "Projections", "check_projections"]
