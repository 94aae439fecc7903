"""Mean pooling over the visible keys: the parameter-free, similarity-free baseline.

Uniform weights ``out_i = mean_{j visible to i} v_j`` are linear attention with the constant
feature map φ(x) = 1, so causal, padded and recurrent forms come from the shared kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS


class MeanAttention(FeatureMapAttention):
    """Average of the visible values; ignores q and k (a pooling baseline, as asked by the
    reviewers of optimization-based attention)."""

    name = "mean"

    def __init__(
        self,
        *,
        head_dim: int,
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
        implementation: str = "auto",
    ) -> None:
        super().__init__(
            head_dim=head_dim, chunk_size=chunk_size, eps=eps, implementation=implementation
        )

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        return torch.ones_like(x[..., :1])
