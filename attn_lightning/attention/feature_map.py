"""Base class for "linear attention with a feature map": sim(q, k) = φ(q)ᵀφ(k).

Linear (Katharopoulos), Performer (FAVOR+), PolySketch and mean pooling only define φ; the
non-causal, causal-chunked and recurrent forms all come from ``linear_kernels`` (one kernel, no
per-variant copies).
"""

from __future__ import annotations

import abc

import torch
from torch import Tensor

from attn_lightning.attention.base import Attention, Layout, Mask, State, accumulation_dtype
from attn_lightning.attention.ops.linear_kernels import (
    DEFAULT_EPS,
    causal_linear_attention,
    linear_attention,
    linear_attention_step,
)
from attn_lightning.attention.options import check_eps, check_int


class FeatureMapAttention(Attention):
    """Kernel attention ``out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (c + φ(q_i)ᵀ Σ_j φ(k_j))``.

    Subclasses implement ``feature_map`` and may set ``normalizer_offset`` (c). Feature maps are
    evaluated in float32 at least, with autocast off, so exp-type features cannot overflow in
    half precision.
    """

    supports_recurrence = True
    normalizer_offset: float = 0.0

    def __init__(self, *, head_dim: int, chunk_size: int = 64, eps: float = DEFAULT_EPS) -> None:
        super().__init__(head_dim=head_dim)
        self.chunk_size = check_int("chunk_size", chunk_size, minimum=1, what="tokens per chunk")
        self.eps = check_eps(eps)

    @abc.abstractmethod
    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        """φ: ``(B, H, N, D) -> (B, H, N, F)``, non-negative for a well-defined normaliser."""

    def features(self, x: Tensor, *, is_query: bool) -> Tensor:
        """``feature_map`` evaluated in the accumulation dtype with autocast disabled."""
        with torch.autocast(device_type=x.device.type, enabled=False):
            return self.feature_map(x.to(accumulation_dtype(x.dtype)), is_query=is_query)

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        phi_q = self.features(q, is_query=True)
        phi_k = self.features(k, is_query=False)
        if key_padding_mask is not None:
            # Zero features: a masked key adds to neither Σφ(k)vᵀ nor Σφ(k).
            phi_k = phi_k.masked_fill(~key_padding_mask[:, None, :, None], 0.0)
        kwargs = {"offset": self.normalizer_offset, "eps": self.eps}
        if causal:
            return causal_linear_attention(phi_q, phi_k, v, chunk_size=self.chunk_size, **kwargs)
        return linear_attention(phi_q, phi_k, v, **kwargs)

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        phi_q = self.features(q, is_query=True)
        phi_k = self.features(k, is_query=False)
        return linear_attention_step(
            phi_q, phi_k, v, state, offset=self.normalizer_offset, eps=self.eps
        )
