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

from attn_lightning.attention.base import Attention, State, allowed_keys


class SoftmaxAttention(Attention):
    """``softmax(q kᵀ · scale) v``; ``step`` keeps a KV cache ``(k: (B,H,T,D), v: (B,H,T,Dv))``.

    Args:
        head_dim: D.
        scale: logit scale; None means 1/√D.
    """

    name = "softmax"
    supports_recurrence = True  # exact, but the state (KV cache) grows with the context

    def __init__(self, *, head_dim: int, scale: float | None = None) -> None:
        super().__init__(head_dim=head_dim)
        if scale is not None and not scale > 0:
            raise ValueError(f"scale must be > 0 or None (1/sqrt(head_dim)), got {scale!r}")
        self.scale = scale if scale is not None else 1.0 / math.sqrt(head_dim)

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None
    ) -> Tensor:
        if key_padding_mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=self.scale)
        allowed = allowed_keys(
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
        if state is not None:
            k = torch.cat([state[0], k], dim=2)
            v = torch.cat([state[1], v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, scale=self.scale)
        return out, (k, v)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, scale={self.scale:.4g}"
