"""Forward FLOPs of one attention call, counted from each backend's algorithm: a row a backend.

``FORMULAS`` is the table ``{backend name: formula}``, one row for every registered backend; a
formula is ``<name>_flops(shape, *, causal, <options>) -> FlopCount`` and ``attention_flops(name,
shape, options)`` looks it up. A call is the backend's ``forward`` on ``q: (B, H, L, D)``,
``k: (B, H, S, D)``, ``v: (B, H, S, Dv)``, no padding mask, eval mode unless ``training=True``.
Terms are written per batch·head and scaled by B·H (``count``). Counted: matmuls as 2·m·n·k
(what ``FlopCounterMode`` measures, which the tests check term by term), LAPACK factorisations
and solves by their textbook counts, and pool's window sums (its only work); element-wise work,
non-product reductions, masks and copies are ignored. The formulas and the reasons are tabled
in docs/benchmarks.md, "FLOPs per call". Projections (not part of a call) are in ``sites``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from attn_lightning.attention.ops.local_window import block_size, uses_blocks
from attn_lightning.attention.ops.score_form import score_widths, uses_kernel_form
from lab.benchmarks.flop_count import (
    CallShape,
    FlopCount,
    Terms,
    causal_padded,
    count,
    feature_product,
    no_causal_form,
    symmetric,
    tiled_pairs,
    visible_pairs,
)


def softmax_flops(
    shape: CallShape, *, causal: bool = False, window: int | None = None
) -> FlopCount:
    """``softmax(QKᵀ/√D) V``: 2·P·D + 2·P·Dv (P = visible pairs); the softmax is ignored. With a
    ``window`` long enough for blocks (``local_window``): P = every (query, neighbour key) pair
    of the blocks, n·b·(2b or 3b) for N padded to n blocks of b."""
    pairs = visible_pairs(shape.queries, shape.keys, causal)
    if window is not None and uses_blocks(shape.queries, window, causal):
        size = block_size(window)
        pairs = -(-shape.queries // size) * size * size * (2 if causal else 3)
    return count(
        shape,
        {"scores QKᵀ": 2 * pairs * shape.head_dim, "weights·V": 2 * pairs * shape.value_dim},
    )


def linear_flops(shape: CallShape, *, causal: bool = False, chunk_size: int = 64) -> FlopCount:
    """Katharopoulos et al.: F = D, an element-wise φ (not counted)."""
    return feature_product(shape, shape.head_dim, {}, causal=causal, chunk_size=chunk_size)


def cosformer_flops(
    shape: CallShape, *, causal: bool = False, horizon: int | None = None, chunk_size: int = 64
) -> FlopCount:
    """cosFormer: F = 2D, relu(x) times sin θ and cos θ (element-wise, not counted); ``horizon``
    changes the angles, not the work."""
    return feature_product(shape, 2 * shape.head_dim, {}, causal=causal, chunk_size=chunk_size)


def mean_flops(shape: CallShape, *, causal: bool = False, chunk_size: int = 64) -> FlopCount:
    """Mean pooling: the feature-map kernel with φ = 1, F = 1."""
    return feature_product(shape, 1, {}, causal=causal, chunk_size=chunk_size)


def taylor_flops(
    shape: CallShape,
    *,
    causal: bool = False,
    feature_dim: int | None = None,
    evaluation: str = "auto",
    chunk_size: int = 64,
) -> FlopCount:
    """Based: F = 1 + d' + d'(d'+1)/2, φ's symmetric square two (d' × d'(d'+1)/2) products; or
    the (L, S) scores ``1 + s + s²/2`` (one width-d' product) where ``evaluation`` picks them."""
    d, n = shape.head_dim if feature_dim is None else feature_dim, shape.queries + shape.keys
    features = 1 + d + symmetric(d)
    if score_form(shape, evaluation, (d,), causal, chunk_size, features):
        return score_form_count(shape, (d,), {}, causal=causal)
    phi = {"φ(q), φ(k)": 4 * d * symmetric(d) * n}
    return feature_product(shape, features, phi, causal=causal, chunk_size=chunk_size)


def score_form(
    shape: CallShape,
    evaluation: str,
    widths: tuple[int, ...],
    causal: bool,
    chunk_size: int,
    features: int | None = None,
) -> bool:
    """Whether the backend runs its (L, S) score form on this call (``uses_kernel_form``)."""
    return uses_kernel_form(
        evaluation,
        queries=shape.queries,
        keys=shape.keys,
        value_dim=shape.value_dim,
        widths=widths,
        causal=causal,
        chunk_size=chunk_size,
        features=features,
    )


def score_form_count(
    shape: CallShape, widths: tuple[int, ...], terms: Terms, *, causal: bool
) -> FlopCount:
    """The (L, S) form: ``terms`` before it, one score product per squared term's width, then the
    weights times V (the mask and normaliser are not matmuls), over the pairs the tiles compute
    (``tiled_pairs``: causal query blocks skip the future)."""
    pairs = tiled_pairs(shape.queries, shape.keys, causal)
    scores = {f"scores ⟨·,·⟩ (width {w})": 2 * pairs * w for w in widths}
    return count(shape, {**terms, **scores, "weights·V": 2 * pairs * shape.value_dim})


def polynomial_flops(shape: CallShape, *, causal: bool = False) -> FlopCount:
    """The exact power kernel (``power_exact``): softmax's two products over the pairs its tiles
    compute; the polynomial itself is element-wise."""
    pairs = tiled_pairs(shape.queries, shape.keys, causal)
    return count(
        shape,
        {"scores QKᵀ": 2 * pairs * shape.head_dim, "weights·V": 2 * pairs * shape.value_dim},
    )


def performer_feature_dim(num_features: int, kernel: str) -> int:
    """F: m for ``positive``, 2m for ``hyperbolic``/``trigonometric`` (``PerformerAttention``)."""
    return num_features if kernel == "positive" else 2 * num_features


def performer_flops(
    shape: CallShape,
    *,
    causal: bool = False,
    num_features: int = 256,
    kernel: str = "positive",
    chunk_size: int = 64,
) -> FlopCount:
    """FAVOR+: φ(x) needs the projection W x (m×D) per input token; the exp is ignored."""
    d, m = shape.head_dim, num_features
    phi = {"φ(q): QWᵀ": 2 * shape.queries * d * m, "φ(k): KWᵀ": 2 * shape.keys * d * m}
    features = performer_feature_dim(num_features, kernel)
    return feature_product(shape, features, phi, causal=causal, chunk_size=chunk_size)


def polysketch_features(
    head_dim: int,
    *,
    sketch: str = "random",
    degree: int = 4,
    sketch_size: int = 32,
    learned_coefficients: bool = False,
    sketch_levels: int = 2,
) -> tuple[int, int]:
    """(F, matmul FLOPs of φ per token) of ``PolySketchAttention.feature_map``."""
    d, r = head_dim, sketch_size
    square_x = 4 * d * symmetric(d)  # symmetric_square of x itself: two (D × D(D+1)/2) products
    square_s = 4 * r * symmetric(r)  # symmetric_square of the r-dim sketch
    gaussian = 4 * d * r  # RandomPolySketch: x S1 and x S2
    if learned_coefficients:  # [√a0, √a2 sym(x⊗x), √a4 sym(s⊗s)]: random sketch only
        if degree == 2:
            return 1 + symmetric(d), square_x
        return 1 + symmetric(d) + symmetric(r), square_x + gaussian + square_s
    if (sketch, degree) == ("random", 2):  # s = identity, r = D
        return symmetric(d), square_x
    if (sketch, degree) == ("random", 4):
        return symmetric(r), gaussian + square_s
    if (sketch, degree) == ("learned", 4):
        inputs = [d] + [r] * (sketch_levels - 1)  # each level: Linear(in, 8r), Linear(8r, r)
        branch = sum(2 * n_in * 8 * r + 2 * 8 * r * r for n_in in inputs)
        return symmetric(r), 2 * branch + square_s
    raise ValueError(f"polysketch has no sketch={sketch!r} of degree {degree!r}")


def polysketch_flops(
    shape: CallShape,
    *,
    causal: bool = False,
    sketch: str = "random",
    degree: int = 4,
    sketch_size: int = 32,
    learned_coefficients: bool = False,
    local_block: int = 0,
    sketch_levels: int = 2,
    evaluation: str = "auto",
    chunk_size: int = 64,
) -> FlopCount:
    """PolySketchFormer: φ = symmetric square of a sketch, then the feature-map kernel, or with
    ``local_block`` the exact power kernel inside blocks (see the module docstring); the
    score-matrix form where ``evaluation`` picks it (``polysketch.uses_kernel_form``)."""
    features, per_token = polysketch_features(
        shape.head_dim,
        sketch=sketch,
        degree=degree,
        sketch_size=sketch_size,
        learned_coefficients=learned_coefficients,
        sketch_levels=sketch_levels,
    )
    phi = {"φ(q), φ(k)": per_token * (shape.queries + shape.keys)}
    if not local_block:
        widths = score_widths(shape.head_dim, degree, sketch_size, learned_coefficients)
        if not score_form(shape, evaluation, widths, causal, chunk_size):
            return feature_product(shape, features, phi, causal=causal, chunk_size=chunk_size)
        # The (L, S) form: the sketch s(x) without its symmetric square, then the scores.
        sketch_cost = per_token - 4 * sum(w * symmetric(w) for w in widths)
        return score_form_count(
            shape,
            widths,
            {"s(q), s(k)": sketch_cost * (shape.queries + shape.keys)},
            causal=causal,
        )
    f, d, e, b = features, shape.head_dim, shape.value_dim + 1, local_block
    if causal:
        padded = causal_padded(shape, b)
        terms = {
            **phi,
            "block states Φ_kᵀ[V, 1]": 2 * padded * f * e,
            "far readout Φ_q prefix": 2 * padded * f * e,
            "near scores (in-block)": 2 * padded * b * d,
            "near weights·[V, 1]": 2 * padded * b * e,
        }
        return count(shape, terms)
    q_blocks, k_blocks = -(-shape.queries // b), -(-shape.keys // b)
    both = min(q_blocks, k_blocks)  # blocks with queries and keys: only those have a near part
    terms = {
        **phi,
        "all-key state Φ_kᵀ[V, 1]": 2 * shape.keys * f * e,
        "own-block states": 2 * both * b * f * e,
        "near scores (in-block)": 2 * both * b * b * d,
        "near weights·[V, 1]": 2 * both * b * b * e,
        "far readout Φ_q (total − own)": 2 * q_blocks * b * f * e,
    }
    return count(shape, terms)


def pool_flops(
    shape: CallShape,
    *,
    causal: bool = False,
    pool_size: int = 3,
    grid: tuple[int, int] | None = None,
) -> FlopCount:
    """PoolFormer's window sums, L·Dv·w: w = k on ``grid`` None (k consecutive tokens, the
    latency benchmark's case), k² on the (h, w) map DETR's encoder gives."""
    no_causal_form("pool", causal)
    if shape.queries != shape.keys:
        raise ValueError(f"pool needs L == S, got L={shape.queries}, S={shape.keys}")
    if grid is not None and grid[0] * grid[1] != shape.keys:
        raise ValueError(f"grid {grid} has {grid[0] * grid[1]} cells, S={shape.keys}")
    window = pool_size if grid is None else pool_size**2
    return count(shape, {}, other={"window sums": shape.queries * shape.value_dim * window})


def optimization_flops(
    shape: CallShape,
    *,
    causal: bool = False,
    iterations: int = 10,
    solver: str = "woodbury",
    random_tokens: int = 8,
    dictionary: str = "values",
    training: bool = False,
) -> FlopCount:
    """Lasso codes by K unrolled ADMM steps; in ``training`` the R random tokens join the
    dictionary (S' = S + R), in eval (the benchmark's mode) S' = S."""
    no_causal_form("optimization", causal)
    d, length, s = shape.head_dim, shape.queries, shape.keys
    if dictionary == "values" and shape.value_dim != d:
        raise ValueError(
            f"optimization with dictionary='values' needs Dv == D, got D={d}, Dv={shape.value_dim}"
        )
    cols = s + (random_tokens if training else 0)  # S'
    matmul = {
        "Gram DmᵀDm": 2 * cols * d * d,
        "DmᵀQ": 2 * length * cols * d,
        f"ADMM M·X ({iterations} iterations)": iterations * 4 * length * cols * d,
        "weights·V": 2 * length * s * shape.value_dim,
    }
    if solver == "woodbury":
        solve = {"Cholesky of ρI + DmᵀDm": d**3 / 3, "Cholesky solve for P": 2 * d * d * cols}
    elif solver == "svd":
        rank = min(cols, d)
        matmul["inverse from singular vectors"] = 2 * rank * d * d
        matmul["analytic-gradient term (0 in value)"] = 4 * d**3
        matmul["P = G⁻¹Dmᵀ"] = 2 * d * d * cols
        big, small = max(cols, d), min(cols, d)
        solve = {"thin SVD of Dm": 6 * big * small**2 + 20 * small**3}
    else:
        raise ValueError(f"unknown solver {solver!r}; allowed: woodbury, svd")
    return count(shape, matmul, solve)


FORMULAS: dict[str, Callable[..., FlopCount]] = {
    "cosformer": cosformer_flops,
    "linear": linear_flops,
    "mean": mean_flops,
    "optimization": optimization_flops,
    "performer": performer_flops,
    "polynomial": polynomial_flops,
    "polysketch": polysketch_flops,
    "pool": pool_flops,
    "softmax": softmax_flops,
    "taylor": taylor_flops,
}


def attention_flops(
    name: str,
    shape: CallShape,
    options: Mapping[str, Any] | None = None,
    *,
    causal: bool = False,
    training: bool = False,
    grid: tuple[int, int] | None = None,
) -> FlopCount | None:
    """The count of backend ``name`` with its constructor ``options``; None for a backend
    without a formula (one registered by user code). Options that do not change the count are
    ignored; ``training`` and ``grid`` reach the formulas that take them."""
    formula = FORMULAS.get(name)
    if formula is None:
        return None
    accepted = inspect.signature(formula).parameters
    kwargs = {k: v for k, v in (options or {}).items() if k in accepted and k != "causal"}
    if "training" in accepted:
        kwargs["training"] = training
    if "grid" in accepted:
        kwargs["grid"] = grid
    return formula(shape, causal=causal, **kwargs)
