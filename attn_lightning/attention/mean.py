"""Mean pooling over the visible keys: the parameter-free, similarity-free baseline.

Uniform weights ``out_i = mean_{j visible to i} v_j`` are linear attention with the constant
feature map φ(x) = 1, so causal, padded and recurrent forms come from the shared kernel.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.feature_map import FeatureMapAttention


class MeanAttention(FeatureMapAttention):
    """Average of the visible values; ignores q and k (a pooling baseline, as asked by the
    reviewers of optimization-based attention)."""

    name = "mean"

    @property
    def feature_dim(self) -> int:
        """F = 1: the constant feature."""
        return 1

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        return torch.ones_like(x[..., :1])
