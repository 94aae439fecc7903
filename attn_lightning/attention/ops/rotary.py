"""Rotary position embedding (RoPE; Su et al. 2021, "RoFormer", arXiv 2104.09864).

Pair ``(x_{2i}, x_{2i+1})`` of the token at position ``t`` turns by the angle ``t · θ_i``, with
``θ_i = base^{-2i/D}`` and ``base = 10000`` (RoFormer eq. 15 and 34, its interleaved pairs)::

    R_t x = (x_{2i} cos tθ_i − x_{2i+1} sin tθ_i,  x_{2i} sin tθ_i + x_{2i+1} cos tθ_i)_i

so ``(R_t q) · (R_s k) = q · R_{s−t} k``. Two users:

* ``net.positional: rotary`` (``models.multihead``): every self-attention turns its heads' q and
  k before the backend sees them. A backend whose similarity is a function of ``q · k``
  (softmax, ``taylor``, the power kernels with ``norm: none``; Performer's estimate of
  ``exp(q · k)`` in expectation) then sees positions only through ``s − t``, at any length. A
  map applied coordinate-wise (``linear``'s elu + 1, the LayerNorm the polynomial backends put
  on q and k by default) does not keep that: ``φ(R_t q) · φ(R_s k)`` depends on t and s.
* ``linear``'s ``rotary: true``: RoFormer §3.3's form for linear attention, the turn applied to
  the features, in the numerator only (``attention.feature_map``), so the pairs' weights depend
  on ``s − t`` and the normaliser stays a sum of non-negative terms.

The angles are computed per call in float32 (float64 for float64 inputs): a table would bound
the length, and a buffer would be rounded by a module cast to bf16; ``L · D / 2`` sines and
cosines are cheap next to the projections. The rotation is a complex multiply in that precision
(bf16 inputs are turned in float32 and rounded once): one fused op where the real form's strided
pairs take several.
"""

from __future__ import annotations

import torch
from torch import Tensor

BASE = 10000.0  # RoFormer's θ_i = 10000^{-2i/D}


def check_rotary_base(base: object, *, option: str = "rotary_base") -> float:
    """``base`` as a float if it is a finite number > 1 (θ_i = base^{-2i/D} then falls from 1
    radian a token), else a ValueError naming ``option``, the value and what is allowed."""
    if isinstance(base, bool) or not isinstance(base, int | float) or not 1 < base < float("inf"):
        raise ValueError(f"{option} must be a number > 1 (RoFormer's is 10000), got {base!r}")
    return float(base)


def check_rotary_width(head_dim: int) -> None:
    """ValueError unless ``head_dim`` is even (RoPE turns pairs of coordinates)."""
    if head_dim % 2:
        raise ValueError(
            f"rotary positions turn pairs of coordinates: each head's width must be even, "
            f"got head_dim {head_dim}"
        )


def turn(*xs: Tensor, offset: int = 0, base: float = BASE) -> tuple[Tensor, ...]:
    """Each ``x: (B, H, N, D)`` turned, its rows at positions ``offset .. offset + N − 1``, with
    ``θ_i = base^{-2i/D}``; the tensors of one call (q and k) share the angles. D even
    (``check_rotary_width``)."""
    x = xs[0]
    # Angles from float64/32 arithmetic, never x's half dtype (bf16 holds integers only to 256).
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    n, d = x.shape[-2], x.shape[-1]
    t = torch.arange(offset, offset + n, device=x.device, dtype=dtype)
    exponent = torch.arange(0, d, 2, device=x.device, dtype=dtype) / d
    angles = torch.outer(t, base**-exponent)  # (N, D/2)
    rotation = torch.polar(torch.ones_like(angles), angles)  # e^{i t θ_j}: (N, D/2) complex
    return tuple(_turn(x, rotation) for x in xs)


def _turn(x: Tensor, rotation: Tensor) -> Tensor:
    """Pair ``(x_2j, x_2j+1)`` as the complex ``x_2j + i x_2j+1`` times ``rotation``: one fused
    multiply (LLaMA's form), in float32 (float64 for float64 inputs), back in ``x``'s dtype."""
    pairs = x.to(rotation.real.dtype).contiguous().unflatten(-1, (-1, 2))  # (B, H, N, D/2, 2)
    return torch.view_as_real(torch.view_as_complex(pairs) * rotation).flatten(-2).to(x.dtype)


__all__ = ["BASE", "check_rotary_base", "check_rotary_width", "turn"]
