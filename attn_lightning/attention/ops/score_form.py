"""The (L, S) score form of the polynomial feature maps, and the cost model that chooses it.

``polysketch`` and ``taylor`` compute one function two ways (their ``evaluation`` option).
``features``: the linear-time form, φ through the shared linear kernels, O(N·F·Dv) with F
quadratic in a width (PolySketch: r(r+1)/2 for the sketch's r; Taylor: 1 + d' + d'(d'+1)/2).
``kernel``: the (L, S) score matrix directly — PolySketch ``⟨s(q'), s(k')⟩²`` (plus the learned
even polynomial's other terms), Taylor ``1 + s + s²/2`` — in O(L·S·(w + Dv)), far cheaper while
the sequence is short next to F (r = 64: 2,080 features against 100 tokens). ``auto`` takes the
form with the lower estimated cost (``uses_kernel_form``). Both give the same outputs up to
rounding. The kernel form runs by tiles with a recomputing backward (``power_exact``,
``even_polynomial``): its memory is linear in N, like the features'.

Shapes: ``sq, sk: (B, H, L|S, r)`` sketches, ``qn, kn: (B, H, L|S, D)`` normalised inputs,
``v: (B, H, S, Dv)``; ``key_padding_mask: (B, S)``, True = real key.
Every function computes in the dtype it is given (the caller passes float32 at least, autocast
off).
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.ops.even_polynomial import even_polynomial_attention
from attn_lightning.attention.ops.power_exact import blocked_keys, exact_power_attention

EVALUATIONS = ("auto", "features", "kernel")
# The score form's element-wise passes over (L, S) (polynomial, mask, row sum, divide and their
# backward), in matmul-FLOP equivalents per score entry computed; a causal call computes about
# half the square (the tiles' query blocks, ``power_exact.score_tiles``). 50 takes the faster
# form at each of 12 CPU measurements (Taylor d' 16 and PolySketch r 32, causal N 256-2,048 and
# not N 512-2,048, B 16, H 2, D 32; docs/benchmarks.md).
SCORE_ENTRY_COST = 50
# Taylor's scores 1 + s + s²/2, lowest degree first.
TAYLOR_COEFFICIENTS = (1.0, 1.0, 0.5)


def score_widths(
    head_dim: int, degree: int, sketch_size: int, learned_coefficients: bool
) -> tuple[int, ...]:
    """Widths of the squared inner products in the score: (D,) for degree 2, (r,) for the
    sketch, (D, r) or (D,) with learned coefficients."""
    sketch_width = head_dim if degree == 2 else sketch_size
    if not learned_coefficients:
        return (sketch_width,)
    return (head_dim, sketch_size) if degree == 4 else (head_dim,)


def uses_kernel_form(
    evaluation: str,
    *,
    queries: int,
    keys: int,
    value_dim: int,
    widths: tuple[int, ...],
    causal: bool,
    chunk_size: int,
    features: int | None = None,
) -> bool:
    """Whether ``evaluation`` means the (L, S) score-matrix form for this call.

    ``widths`` are the inner-product widths of the score's squared terms (r for the sketch, D for
    the exact degree-2 term, d' for Taylor); ``features`` the feature form's F (None: the widths'
    symmetric squares, plus a_0's constant when there are several). ``auto``: the kernel form
    when its cost is lower — matmul FLOPs, plus ``SCORE_ENTRY_COST`` per score entry computed
    (causal: about half the square) for its element-wise passes. Both costs are per head and
    leave out the sketch s(x) itself, which both forms compute.
    """
    if evaluation != "auto":
        return evaluation == "kernel"
    e = value_dim + 1
    f = features or sum(w * (w + 1) // 2 for w in widths) + (len(widths) > 1)  # + a_0's 1
    squares = 4 * (queries + keys) * sum(w * (w + 1) // 2 * w for w in widths)
    if causal:
        c = max(1, min(chunk_size, queries))
        product = 2 * queries * (c * (f + e) + 2 * f * e)
    else:
        product = 2 * (queries + keys) * f * e
    pairs = queries * keys // 2 if causal else queries * keys
    kernel = pairs * (2 * (sum(widths) + e) + SCORE_ENTRY_COST)
    return kernel < squares + product


def kernel_form_for(
    evaluation: str,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    widths: tuple[int, ...],
    causal: bool,
    chunk_size: int,
    features: int | None = None,
) -> bool:
    """``uses_kernel_form`` for a call on ``q: (B, H, L, D)``, ``k``, ``v: (B, H, S, Dv)``."""
    return uses_kernel_form(
        evaluation,
        queries=q.shape[2],
        keys=k.shape[2],
        value_dim=v.shape[-1],
        widths=widths,
        causal=causal,
        chunk_size=chunk_size,
        features=features,
    )


def sketch_score_attention(
    sq: Tensor,
    sk: Tensor,
    v: Tensor,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    offset: float,
) -> Tensor:
    """``Σ_j ⟨sq_i, sk_j⟩² v_j / (offset + Σ_j ⟨sq_i, sk_j⟩²)`` over the visible keys.

    The plain sketch's scores are the degree-2 power kernel on the sketches, so this is the tiled
    ``power_exact`` Function (same values, gradients by hand, no (B, H, L, S) tensor kept).
    """
    blocked = blocked_keys(sq, sk, causal=causal, key_padding_mask=key_padding_mask)
    return exact_power_attention(sq, sk, v, blocked=blocked, causal=causal, degree=2, offset=offset)


def even_polynomial_score_attention(
    qn: Tensor,
    kn: Tensor,
    v: Tensor,
    coefficients: Tensor,
    sketches: tuple[Tensor, Tensor] | None,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    offset: float,
) -> Tensor:
    """The learned even polynomial's scores ``a_0 + a_2⟨q', k'⟩² (+ a_4⟨s_q, s_k⟩²)``
    (``coefficients`` a_0, a_2[, a_4], ``sketches`` (s_q, s_k) with a_4 only), normalised over the
    visible keys: ``even_polynomial``'s tiled Function."""
    blocked = blocked_keys(qn, kn, causal=causal, key_padding_mask=key_padding_mask)
    return even_polynomial_attention(
        qn,
        kn,
        v,
        coefficients.to(qn.dtype),
        sketches,
        blocked=blocked,
        causal=causal,
        offset=offset,
    )


def taylor_score_attention(
    qd: Tensor,
    kd: Tensor,
    v: Tensor,
    *,
    causal: bool,
    key_padding_mask: Tensor | None,
    offset: float,
) -> Tensor:
    """Based's Taylor kernel as its scores: ``sim = 1 + s + s²/2``, ``s = ⟨q', k'⟩/√d'`` for
    ``qd, kd: (B, H, L|S, d')``, normalised over the visible keys.

    The polynomial ``1 + s + s²/2`` is positive for every s, so it is ``power_exact``'s learned
    polynomial ``max(0, Σ a_i s^i)`` with fixed a = (1, 1, ½): its tiled Function, which keeps no
    (B, H, L, S) tensor for backward (docs/benchmarks.md, "Causal score forms skip the future").
    """
    blocked = blocked_keys(qd, kd, causal=causal, key_padding_mask=key_padding_mask)
    coefficients = torch.tensor(TAYLOR_COEFFICIENTS, dtype=qd.dtype, device=qd.device)
    return exact_power_attention(
        qd * qd.shape[-1] ** -0.5,
        kd,
        v,
        blocked=blocked,
        causal=causal,
        degree=2,
        offset=offset,
        coefficients=coefficients,
    )
