"""Float64 references of polynomial attention and PolySketch: the bounded inputs, the power
kernel, the random sketch and the local-block mix."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

from attn_lightning.attention.naive.common import F64, normalised_mix, visible_keys
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS
from attn_lightning.attention.ops.qk_norm import LN_EPS


def naive_bounded(
    x: Tensor,
    *,
    normalize: bool = True,
    norm: str = "learned",
    weight: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """q' of ``qk_norm`` written out, with ``LN(x) = (x − mean) / √(population var + 1e-5)``:
    ``learned``: ``LN(x)·weight + bias`` (1 and 0 when None); ``fixed``: ``LN(x)·D^{-1/4}``;
    ``normalize=False`` or ``none``: ``x·D^{-1/4}``."""
    x = x.to(F64)
    scale = x.shape[-1] ** -0.25
    if not normalize or norm == "none":
        return x * scale
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).square().mean(-1, keepdim=True)
    x = (x - mean) / torch.sqrt(var + LN_EPS)
    if norm == "fixed":
        return x * scale
    if weight is not None:
        x = x * weight.to(F64)
    return x if bias is None else x + bias.to(F64)


Inputs = Callable[[Tensor], Tensor]


def naive_polynomial(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    degree: int = 4,
    coefficients: Tensor | None = None,
    normalize: bool = True,
    inputs: Inputs | None = None,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Power attention ``A_ij = d^p / (1 + Σ_j d^p + eps)``, d = ⟨q', k'⟩; with
    ``coefficients`` a_0..a_p the learned polynomial ``max(0, Σ_i a_i d^i) / (Σ_j … + eps)``.
    ``inputs`` maps x to x' (default: ``naive_bounded`` at its initial learnable LN)."""
    bound = inputs or (lambda x: naive_bounded(x, normalize=normalize))
    d = bound(q) @ bound(k).mT
    if coefficients is None:
        sim, offset = d**degree, 1.0
    else:
        sim = sum(a * d**i for i, a in enumerate(coefficients.to(F64))).clamp_min(0.0)
        offset = 0.0
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=offset, eps=eps)


def naive_random_sketch(x: Tensor, s1: Tensor, s2: Tensor) -> Tensor:
    """The random PolySketch ``s(x) = √r · (x S1) ∘ (x S2)`` for ``S1, S2: (D, r)``."""
    x = x.to(F64)
    return math.sqrt(s1.shape[-1]) * (x @ s1.to(F64)) * (x @ s2.to(F64))


def naive_polysketch(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    sketch: Callable[[Tensor], Tensor],
    *,
    normalize: bool = True,
    inputs: Inputs | None = None,
    even_coefficients: Tensor | None = None,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """PolySketch ``A_ij = ⟨s(q'), s(k')⟩² / (1 + Σ_j ⟨s(q'), s(k')⟩² + eps)`` for a sketch s
    (``naive_random_sketch``, the learned sketch module, or the identity for degree 2).

    ``even_coefficients`` (a_0, a_2[, a_4]): the learned even polynomial
    ``sim = a_0 + a_2 ⟨q', k'⟩² [+ a_4 ⟨s(q'), s(k')⟩²]``, normalised without the "1 +".
    ``inputs`` maps x to x' (default: ``naive_bounded`` at its initial learnable LN)."""
    bound = inputs or (lambda x: naive_bounded(x, normalize=normalize))
    qn, kn = bound(q), bound(k)
    sq, sk = sketch(qn), sketch(kn)  # (B, H, L, r), (B, H, S, r)
    if even_coefficients is None:
        sim, offset = (sq @ sk.transpose(-1, -2)) ** 2, 1.0  # (B, H, L, S)
    else:
        a = even_coefficients.to(F64)
        sim = a[0] + a[1] * (qn @ kn.transpose(-1, -2)) ** 2
        if len(a) > 2:
            sim = sim + a[2] * (sq @ sk.transpose(-1, -2)) ** 2
        offset = 0.0
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=offset, eps=eps)


def naive_block_mixed(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    qn: Tensor,
    kn: Tensor,
    *,
    block: int,
    degree: int,
    causal: bool,
    key_padding_mask: Tensor | None = None,
    offset: float = 1.0,
    eps: float = 0.0,
) -> Tensor:
    """PolySketch's mixed block form: ``sim_ij = (qn_i·kn_j)^p`` when ``i // b == j // b``,
    else ``φ(q_i)·φ(k_j)``; ``out = Σ_j sim_ij v_j / (offset + Σ_j sim_ij + eps)`` over the
    visible keys, and 0 for a query that sees none when offset + eps = 0."""
    phi_q, phi_k, v, qn, kn = (t.to(F64) for t in (phi_q, phi_k, v, qn, kn))
    exact = (qn @ kn.transpose(-1, -2)) ** degree  # (B, H, L, S)
    sketched = phi_q @ phi_k.transpose(-1, -2)  # (B, H, L, S)
    query_block = torch.arange(qn.shape[2], device=qn.device) // block
    key_block = torch.arange(kn.shape[2], device=kn.device) // block
    near = query_block[:, None] == key_block[None, :]  # (L, S)
    sim = torch.where(near, exact, sketched)
    allowed = visible_keys(qn, kn, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=offset, eps=eps)
