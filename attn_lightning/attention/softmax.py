"""Exact softmax attention through ``F.scaled_dot_product_attention``.

On CUDA, SDPA dispatches to the flash / memory-efficient kernels when no explicit mask is needed
(causal or unmasked inputs); with a padding mask it falls back to the masked kernels. O(N²·D).
SDPA adds a bool mask to the scores as -inf, so a NaN score (a NaN masked key) stays NaN, and
masked weights multiply v by 0: it relies on ``Attention.forward`` zeroing masked k and v first.

``window=w``: sliding-window attention (the local softmax of Based, Arora et al. 2024, and
Longformer): query i sees key j only when ``|i - j| < w`` — the w most recent tokens up to
itself when causal. Self-attention only (the band is over token indices). Long sequences run by
blocks of max(w, 64) tokens against their neighbours' keys (``ops/local_window.py``, O(N·b·D));
short ones through SDPA with the band as a mask. ``step`` keeps the last w - 1 keys and values
only, a decode state of (w - 1)·(D + Dv) floats per head, whatever the context.

``dropout=p``: in training, each attention weight is zeroed with probability p and the rest
scaled by 1/(1 - p) after the softmax (the weights a query gives no longer sum to 1; they do in
expectation), as Zoology's and the Transformer's attention dropout. In eval mode it does nothing,
so evaluation, ``step`` decoding and checkpoints are those of ``p = 0``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import (
    Attention,
    Layout,
    Mask,
    State,
    accumulation_dtype,
    check_int,
    check_state_request,
)
from attn_lightning.attention.ops import kv_cache, local_window


class SoftmaxAttention(Attention):
    """``softmax(q kᵀ · scale) v``; ``step`` keeps a KV cache ``(k: (B,H,T,D), v: (B,H,T,Dv))``.

    The cache is preallocated (``kv_cache``): appending a token writes one slot, and the buffer
    doubles when full, so a step costs the attention over T keys and no O(T) copy.

    Args:
        head_dim: D.
        scale: logit scale; None means 1/√D.
        cache_size: tokens the KV cache's first buffer holds (None: ``kv_cache.DEFAULT_CAPACITY``);
            set it to the decoding length when known to avoid regrowing. A hint: it grows past.
        window: w, the sliding window (module docstring); None: every key.
        dropout: p, the chance each attention weight is dropped in training (module docstring).
    """

    name = "softmax"
    supports_recurrence = True  # exact, but the state (KV cache) grows with the context

    def __init__(
        self,
        *,
        head_dim: int,
        scale: float | None = None,
        cache_size: int | None = None,
        window: int | None = None,
        dropout: float = 0.0,
    ) -> None:
        super().__init__(head_dim=head_dim)
        if scale is not None and not scale > 0:
            raise ValueError(f"scale must be > 0 or None (1/sqrt(head_dim)), got {scale!r}")
        if cache_size is not None and (
            isinstance(cache_size, bool) or not isinstance(cache_size, int) or cache_size < 1
        ):
            raise ValueError(f"cache_size must be a positive int or None, got {cache_size!r}")
        self.scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)
        self.cache_size = cache_size
        what = "keys within this many positions of a query, itself included; None: all"
        self.window = None if window is None else check_int("window", window, minimum=1, what=what)
        # A window is over token indices: a query's keys are set by where it lies.
        self.positional = self.window is not None
        self.supports_cross_attention = self.window is None
        if (
            isinstance(dropout, bool)
            or not isinstance(dropout, int | float)
            or not 0 <= dropout < 1
        ):
            what = "the chance an attention weight is dropped in training"
            raise ValueError(f"dropout must be a number in [0, 1) ({what}), got {dropout!r}")
        self.dropout = float(dropout)

    @property
    def dropout_p(self) -> float:
        """The dropout probability in effect now: ``dropout`` in training, 0 in eval mode."""
        return self.dropout if self.training else 0.0

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        if key_padding_mask is None and self.window is None:
            return F.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=self.scale, dropout_p=self.dropout_p
            )
        if self.window is not None and local_window.uses_blocks(q.shape[2], self.window, causal):
            acc = accumulation_dtype(torch.promote_types(q.dtype, v.dtype))  # softmax in float32
            with torch.autocast(device_type=q.device.type, enabled=False):
                out = local_window.local_window_attention(
                    q.to(acc),
                    k.to(acc),
                    v.to(acc),
                    window=self.window,
                    causal=causal,
                    key_padding_mask=key_padding_mask,
                    scale=self.scale,
                    dropout=self.dropout_p,
                )
            return out.to(v.dtype)
        allowed = _allowed_keys(
            q.shape[0],
            q.shape[2],
            k.shape[2],
            causal=causal,
            key_padding_mask=key_padding_mask,
            window=self.window,
            device=q.device,
        )
        assert allowed is not None  # a padding mask or a window was given
        # A query with no visible key would give NaN (softmax of all -inf): let it see everything,
        # then zero its output, so neither the output nor any gradient is NaN.
        empty = ~allowed.any(dim=-1, keepdim=True)  # (B, 1, L, 1)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=allowed | empty, scale=self.scale, dropout_p=self.dropout_p
        )
        return out.masked_fill(empty, 0.0)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        if self.window is not None:
            return self._window_step(q, k, v, state)
        state = kv_cache.append(state, k, v, capacity=self.cache_size)
        # No mask: the cache holds only this token and the past. (B, H, 1, T + 1) scores.
        out = F.scaled_dot_product_attention(
            q, state[0], state[1], scale=self.scale, dropout_p=self.dropout_p
        )
        return out, state

    def _window_step(
        self, q: Tensor, k: Tensor, v: Tensor, state: State | None
    ) -> tuple[Tensor, State]:
        """The window's step: this token's key and value after the last w - 1 (an O(w) copy a
        step, so the state never grows), then the last w - 1 of those as the next state."""
        assert self.window is not None
        keys = k if state is None else torch.cat([state[0], k], dim=2)
        values = v if state is None else torch.cat([state[1], v], dim=2)
        out = F.scaled_dot_product_attention(
            q, keys, values, scale=self.scale, dropout_p=self.dropout_p
        )
        kept = keys.shape[2] - min(keys.shape[2], self.window - 1)
        return out, (keys[:, :, kept:], values[:, :, kept:])

    def state_size(self, *, seq_len: int, value_dim: int | None = None) -> int:
        """``T·(D + Dv)`` floats per head: the KV cache of T = N tokens (2·N·D when Dv = D), or
        T = min(N, w - 1) with a window."""
        dv = check_state_request(self.head_dim, seq_len, value_dim)
        tokens = seq_len if self.window is None else min(seq_len, self.window - 1)
        return tokens * (self.head_dim + dv)

    def extra_repr(self) -> str:
        cache = "" if self.cache_size is None else f", cache_size={self.cache_size}"
        window = "" if self.window is None else f", window={self.window}"
        dropout = f", dropout={self.dropout:g}" if self.dropout else ""
        return f"head_dim={self.head_dim}, scale={self.scale:.4g}{cache}{window}{dropout}"


def _allowed_keys(
    batch: int,
    q_len: int,
    k_len: int,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    device: torch.device,
    window: int | None = None,
) -> Tensor | None:
    """Boolean ``(B, 1, L, S)`` mask of which keys each query may see, or None for "all"."""
    if not causal and key_padding_mask is None and window is None:
        return None
    allowed = torch.ones(batch, 1, q_len, k_len, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    if window is not None:  # |i - j| < w
        ones = torch.ones(q_len, k_len, dtype=torch.bool, device=device)
        allowed = allowed & ones.tril(window - 1) & ones.triu(1 - window)
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]
    return allowed
