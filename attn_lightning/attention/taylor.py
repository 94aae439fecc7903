"""Taylor attention: Based's second-order Taylor feature map of exp, in linear time.

Arora, Eyuboglu, Zhang et al., "Simple linear attention language models balance the
recall-throughput tradeoff" (Based), ICML 2024, arXiv 2402.18668::

    sim(q, k) = 1 + s + s²/2,   s = ⟨q', k'⟩ / √d'   (exp(s) to second order)
    φ(x) = [1,  x / d'^{1/4},  sym(x ⊗ x) / (√2 · √d')]     so that   φ(q')ᵀφ(k') = sim(q, k)

with q', k' the first ``feature_dim`` = d' coordinates of each head's q and k (all D when None),
``sym`` the compressed symmetric square of ``ops/sketches.py`` (d'(d'+1)/2 entries for the d'²
of ``x ⊗ x``), and the usual normaliser ``out_i = Σ_j sim_ij v_j / Σ_j sim_ij``. ``1 + s + s²/2
= ((s + 1)² + 1) / 2 ≥ 1/2``: every score is positive although φ has negative entries, so no
clamp is needed; F = 1 + d' + d'(d'+1)/2 features, an F·Dv + F decode state.

Evaluation (``evaluation``, as PolySketch's): ``features`` (the linear-time form above),
``kernel`` (the (L, S) scores ``1 + s + s²/2`` directly, O(L·S·(d' + Dv)): at d' = 16, F = 153
features against a few hundred tokens it is the cheaper form) or ``auto`` (default: the cheaper
by the cost model of ``ops/score_form.py``). Same outputs up to rounding; ``step()`` always uses
the features (the F·Dv + F decode state). With ``implementation: fla`` the score form of a causal
call without a padding mask runs fla's parallel Based kernel (``ops/fla.py``: tiles, no (L, S)
matrix held; d' ≤ 128), and the feature form fla's linear-attention kernel on φ.

Based projects q and k to d' per head (its ``feature_dim``, 16 in the paper's language models)
with their own maps from the model width. Taking the first d' coordinates of the model's own q and
k projections is the same function class with the same parameters for the coordinates used (the
rest of those rows get no gradient), and adds no parameters or initialisation of its own. Under
rotary positions (``net.positional: rotary``, ``ops/rotary.py``) the first d' coordinates are the
d'/2 fastest-turning pairs: Taylor then sees distances, but matches content only through pairs
that turn by up to a radian a token (docs/results/recall.md, ``recall_l64_w64_rotary``).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from attn_lightning.attention.base import (
    Layout,
    Mask,
    accumulation_dtype,
    check_choice,
    check_int,
)
from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.ops import dispatch, fla
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS
from attn_lightning.attention.ops.score_form import (
    EVALUATIONS,
    kernel_form_for,
    taylor_score_attention,
)
from attn_lightning.attention.ops.sketches import symmetric_square


def taylor_feature_dim(feature_dim: int) -> int:
    """F = 1 + d' + d'(d'+1)/2: the constant, the linear and the symmetric quadratic features."""
    return 1 + feature_dim + feature_dim * (feature_dim + 1) // 2


class TaylorAttention(FeatureMapAttention):
    """Linear attention with Based's second-order Taylor features (module docstring).

    Args:
        head_dim: D.
        feature_dim: d', the coordinates of q and k the kernel reads (None: all D; Based: 16).
        evaluation: ``auto``, ``features`` or ``kernel`` (module docstring): how forward computes
            the kernel.
        chunk_size: tokens per chunk in the causal kernel.
        eps: added to the normaliser.
        implementation: the causal kernel, ``auto``, ``torch``, ``fla`` or ``triton`` (the feature
            form's; ``fla`` also the score form's, module docstring).

    Raises:
        ValueError: ``feature_dim`` not an int in 1 .. ``head_dim``; an unknown ``evaluation``.
    """

    name = "taylor"

    def __init__(
        self,
        *,
        head_dim: int,
        feature_dim: int | None = None,
        evaluation: str = "auto",
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
        implementation: str = "auto",
    ) -> None:
        super().__init__(
            head_dim=head_dim, chunk_size=chunk_size, eps=eps, implementation=implementation
        )
        what = "coordinates of q and k the kernel reads; None: all"
        d = (
            head_dim
            if feature_dim is None
            else check_int("feature_dim", feature_dim, minimum=1, what=what)
        )
        if d > head_dim:
            raise ValueError(
                f"feature_dim must be <= head_dim = {head_dim} ({what}), got {feature_dim!r}"
            )
        self.feature_dim_in = d
        self.evaluation = check_choice("evaluation", evaluation, EVALUATIONS, backend=self.name)

    @property
    def feature_dim(self) -> int:
        return taylor_feature_dim(self.feature_dim_in)

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        d = self.feature_dim_in
        x = x[..., :d]
        quadratic = symmetric_square(x) * (1.0 / (math.sqrt(2.0) * math.sqrt(d)))
        return torch.cat([x.new_ones(*x.shape[:-1], 1), x * d**-0.25, quadratic], dim=-1)

    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor:
        d = self.feature_dim_in
        kernel_form = kernel_form_for(
            self.evaluation,
            q,
            k,
            v,
            widths=(d,),
            causal=causal,
            chunk_size=self.chunk_size,
            features=self.feature_dim,
        )
        if not kernel_form:
            return super()._attend(
                q, k, v, causal=causal, key_padding_mask=key_padding_mask, grid=grid
            )
        kernel = dispatch.resolve(self.implementation, v, backend=self.name)  # as the features
        offset = self.normalizer_offset + self.eps
        if kernel == "fla" and causal and key_padding_mask is None:
            return fla.fla_taylor_attention(q[..., :d], k[..., :d], v, eps=offset)
        acc = accumulation_dtype(torch.promote_types(q.dtype, v.dtype))
        with torch.autocast(device_type=q.device.type, enabled=False):
            out = taylor_score_attention(
                q[..., :d].to(acc),
                k[..., :d].to(acc),
                v.to(acc),
                causal=causal,
                key_padding_mask=key_padding_mask,
                offset=offset,
            )
        return out.to(v.dtype)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, feature_dim={self.feature_dim_in}, "
            f"evaluation={self.evaluation!r}"
        )
