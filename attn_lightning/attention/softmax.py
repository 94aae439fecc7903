"""Exact softmax attention through ``F.scaled_dot_product_attention``.

On CUDA, SDPA dispatches to the flash / memory-efficient kernels when no explicit mask is needed
(causal or unmasked inputs); with a padding mask it falls back to the masked kernels. O(N²·D).
SDPA adds a bool mask to the scores as -inf, so a NaN score (a NaN masked key) stays NaN, and
masked weights multiply v by 0: it relies on ``Attention.forward`` zeroing masked k and v first.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import Attention, Layout, Mask, State, check_state_request
from attn_lightning.attention.ops import kv_cache


class SoftmaxAttention(Attention):
    """``softmax(q kᵀ · scale) v``; ``step`` keeps a KV cache ``(k: (B,H,T,D), v: (B,H,T,Dv))``.

    The cache is preallocated (``kv_cache``): appending a token writes one slot, and the buffer
    doubles when full, so a step costs the attention over T keys and no O(T) copy.

    Args:
        head_dim: D.
        scale: logit scale; None means 1/√D.
        cache_size: tokens the KV cache's first buffer holds (None: ``kv_cache.DEFAULT_CAPACITY``);
            set it to the decoding length when known to avoid regrowing. A hint: it grows past.
    """

    name = "softmax"
    supports_recurrence = True  # exact, but the state (KV cache) grows with the context

    def __init__(
        self, *, head_dim: int, scale: float | None = None, cache_size: int | None = None
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

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        if key_padding_mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=self.scale)
        allowed = _allowed_keys(
            q.shape[0],
            q.shape[2],
            k.shape[2],
            causal=causal,
            key_padding_mask=key_padding_mask,
            device=q.device,
        )
        assert allowed is not None  # a padding mask was given
        # A query with no visible key would give NaN (softmax of all -inf): let it see everything,
        # then zero its output, so neither the output nor any gradient is NaN.
        empty = ~allowed.any(dim=-1, keepdim=True)  # (B, 1, L, 1)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed | empty, scale=self.scale)
        return out.masked_fill(empty, 0.0)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        state = kv_cache.append(state, k, v, capacity=self.cache_size)
        # No mask: the cache holds only this token and the past. (B, H, 1, T + 1) scores.
        out = F.scaled_dot_product_attention(q, state[0], state[1], scale=self.scale)
        return out, state

    def state_size(self, *, seq_len: int, value_dim: int | None = None) -> int:
        """``N·(D + Dv)`` floats per head: the KV cache of N tokens (2·N·D when Dv = D)."""
        return seq_len * (self.head_dim + check_state_request(self.head_dim, seq_len, value_dim))

    def extra_repr(self) -> str:
        cache = "" if self.cache_size is None else f", cache_size={self.cache_size}"
        return f"head_dim={self.head_dim}, scale={self.scale:.4g}{cache}"


def _allowed_keys(
    batch: int,
    q_len: int,
    k_len: int,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    device: torch.device,
) -> Tensor | None:
    """Boolean ``(B, 1, L, S)`` mask of which keys each query may see, or None for "all"."""
    if not causal and key_padding_mask is None:
        return None
    allowed = torch.ones(batch, 1, q_len, k_len, dtype=torch.bool, device=device)
    if causal:
        allowed = allowed & torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril()
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]
    return allowed
