"""Float64 O(N²) references of every backend, written plainly from the formulas.

One per registered backend, named ``naive_<name>`` (a test checks it). The fast paths (chunked
causal kernels, tiled power attention, Woodbury solves) are tested against these, outputs and
gradients, and the approximation study uses ``naive_softmax`` as its
ground truth. Nothing here is fast or clever on purpose: each function materialises the full
(B, H, L, S) similarity and masks it. Inputs are promoted to float64 (differentiably, so
gradients reach the caller's tensors). By family: ``common`` (visible keys, the normalised mix),
``kernels`` (softmax and the feature maps), ``polynomial`` (power kernels, PolySketch) and
``mixers`` (optimization, pooling); every name is importable from here. Shapes as in
``base.py``::

    q: (B, H, L, D)   k: (B, H, S, D)   v: (B, H, S, Dv)   ->   (B, H, L, Dv)

``key_padding_mask``: ``(B, S)`` bool, True = real token. A query that sees no key outputs 0.
"""

from __future__ import annotations

from attn_lightning.attention.naive.common import F64, normalised_mix, visible_keys
from attn_lightning.attention.naive.kernels import (
    LINEAR_FEATURE_MAPS,
    naive_cosformer,
    naive_kernel_attention,
    naive_linear,
    naive_mean,
    naive_performer,
    naive_performer_features,
    naive_softmax,
    naive_taylor,
)
from attn_lightning.attention.naive.mixers import naive_optimization, naive_pool
from attn_lightning.attention.naive.polynomial import (
    naive_block_mixed,
    naive_bounded,
    naive_polynomial,
    naive_polysketch,
    naive_random_sketch,
)

__all__ = [
    "F64",
    "LINEAR_FEATURE_MAPS",
    "naive_block_mixed",
    "naive_bounded",
    "naive_cosformer",
    "naive_kernel_attention",
    "naive_linear",
    "naive_mean",
    "naive_optimization",
    "naive_performer",
    "naive_performer_features",
    "naive_polynomial",
    "naive_polysketch",
    "naive_pool",
    "naive_random_sketch",
    "naive_softmax",
    "naive_taylor",
    "normalised_mix",
    "visible_keys",
]
