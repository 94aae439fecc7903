"""Forward FLOPs of one attention call, counted from each backend's algorithm: a row a backend.

``FORMULAS`` is the table ``{backend name: formula}``, one row for every registered backend; a
formula is ``<name>_flops(shape, *, causal, <options>) -> FlopCount`` and ``attention_flops(name,
shape, options)`` looks it up. A call is the backend's ``forward`` on ``q: (B, H, L, D)``,
``k: (B, H, S, D)``, ``v: (B, H, S, Dv)``, no padding mask, eval mode unless ``training=True``.
Every count below is per batch·head and is multiplied by B·H. What is counted (matmuls as 2·m·n·k,
LAPACK solves, element-wise work ignored) is said in ``flop_count``.

Formulas per batch·head (F features, C = causal chunk, N' = N rounded up to a multiple of C,
E = Dv + 1 when a normaliser column rides along, P = visible (query, key) pairs):

* softmax, polynomial (exact): ``2·P·D`` (scores) ``+ 2·P·Dv`` (weights·V); P = L·S, or causal
  L·(L+1)/2 — the pairs the algorithm needs; a dense-mask implementation (SDPA's math path,
  ``polynomial``'s tiles) computes all L·S and discards the masked half.
* feature map (linear F = D, performer F = m or 2m, polysketch F = r(r+1)/2, mean F = 1):
  ``φ(q) + φ(k) + 2·S·F·Dv`` (state Σφ(k)vᵀ) ``+ 2·L·F·(Dv+1)`` (readout φ(q)ᵀ[S, z]);
  causal (chunked): ``φ(q) + φ(k) + 2·N'·(C·F + C·E + 2·F·E)`` (in-chunk scores, in-chunk
  weights·[V,1], chunk states, cross-chunk readout). φ: linear and mean 0 (element-wise);
  performer 2·n·D·m per input (the projection Wx); polysketch random degree 4: 4·n·D·r (the
  two Gaussian sketches) + 4·n·r·F (symmetric square), degree 2: 4·n·D·F with F = D(D+1)/2,
  learned: per branch and level 2·n·d_in·8r + 2·n·8r·r, two branches, + 4·n·r·F.
  Where ``evaluation`` takes the score-matrix form (short sequences; ``polysketch.
  uses_kernel_form``): the sketch without its square, ``+ 2·L·S·w`` per squared term of width w
  (r, or D for degree 2 and the learned polynomial's a_2 term) ``+ 2·L·S·Dv`` (weights·V).
* polysketch ``local_block=b`` (nb blocks, E = Dv + 1): non-causal ``2·S·F·E`` (all-key state)
  ``+ 2·m·b·F·E`` (own-block states, m = min(⌈L/b⌉, ⌈S/b⌉)) ``+ 2·m·b²·(D + E)`` (exact in-block
  scores and weights·[V,1]) ``+ 2·⌈L/b⌉·b·F·E`` (far readout); causal ``2·N_b·(2·F·E + b·(D+E))``
  with N_b = ⌈N/b⌉·b.
* optimization (S' = S + R columns; R random tokens in training only, so **R = 0 in eval**, the
  benchmark's mode; K iterations): matmul ``2·S'·D²`` (Gram DmᵀDm) ``+ 2·L·S'·D`` (DmᵀQ)
  ``+ K·4·L·S'·D`` (each iteration's M·X = (X − (X Dm) P)/ρ: two products) ``+ 2·L·S·Dv``
  (weights·V); solve, Woodbury: ``D³/3`` (Cholesky of ρI + DmᵀDm) ``+ 2·D²·S'`` (solve for
  P = (ρI + DmᵀDm)⁻¹Dmᵀ); SVD: matmul ``+ 2·min(S', D)·D² + 4·D³ + 2·D²·S'`` (the inverse from
  the singular vectors, its analytic-gradient term — exactly 0 in value but computed — and P),
  solve ``6·m·n² + 20·n³`` (thin SVD of the S'×D dictionary, m = max, n = min). Element-wise:
  the soft-threshold, the dual update and the |z|⁵ weights (~10·K·L·S') are ignored.
* mean: the feature-map formula with F = 1.
* pool (k = ``pool_size``, w = k on a 1-D window, k² on an h×w grid): 0 matmul, other
  ``L·Dv·w`` (window sums); needs L = S.

Projections are not part of a call (``MultiHeadAttention`` runs them): 2·n·E² each for Q, K
(none with ``no_qk``), V and out — see ``sites``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from attn_lightning.attention.ops.polysketch_eval import uses_kernel_form
from lab.benchmarks.flop_count import (
    CallShape,
    FlopCount,
    causal_padded,
    count,
    feature_product,
    format_flops,
    no_causal_form,
    symmetric,
    visible_pairs,
)

__all__ = [
    "FORMULAS",
    "CallShape",
    "FlopCount",
    "attention_flops",
    "format_flops",
    "linear_flops",
    "mean_flops",
    "optimization_flops",
    "performer_feature_dim",
    "performer_flops",
    "polynomial_flops",
    "polysketch_features",
    "polysketch_flops",
    "pool_flops",
    "softmax_flops",
]


# ------------------------------------------------------------------------------- quadratic
def softmax_flops(shape: CallShape, *, causal: bool = False) -> FlopCount:
    """``softmax(QKᵀ/√D) V``: 2·P·D + 2·P·Dv (P = visible pairs); the softmax is ignored."""
    pairs = visible_pairs(shape.queries, shape.keys, causal)
    return count(
        shape,
        {"scores QKᵀ": 2 * pairs * shape.head_dim, "weights·V": 2 * pairs * shape.value_dim},
    )


def polynomial_flops(shape: CallShape, *, causal: bool = False) -> FlopCount:
    """Exact power / learned polynomial: the products of softmax (the power and the Horner
    polynomial are element-wise); the q/k LayerNorm is ignored."""
    return softmax_flops(shape, causal=causal)


# ----------------------------------------------------------------------------- feature map
def linear_flops(shape: CallShape, *, causal: bool = False, chunk_size: int = 64) -> FlopCount:
    """Katharopoulos et al.: F = D, an element-wise φ (not counted)."""
    return feature_product(shape, shape.head_dim, {}, causal=causal, chunk_size=chunk_size)


def mean_flops(shape: CallShape, *, causal: bool = False, chunk_size: int = 64) -> FlopCount:
    """Mean pooling: the feature-map kernel with φ = 1, F = 1."""
    return feature_product(shape, 1, {}, causal=causal, chunk_size=chunk_size)


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
    """(F, matmul FLOPs of φ per token) of ``PolySketchAttention.feature_map``.

    Raises:
        ValueError: a (sketch, degree) pair the backend does not have.
    """
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


def _score_widths(
    head_dim: int, degree: int, sketch_size: int, learned_coefficients: bool
) -> tuple[int, ...]:
    """As ``PolySketchAttention.score_widths``: the widths of the squared inner products."""
    if learned_coefficients:
        return (head_dim, sketch_size) if degree == 4 else (head_dim,)
    return (head_dim,) if degree == 2 else (sketch_size,)


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
    phi = {"φ(q)": per_token * shape.queries, "φ(k)": per_token * shape.keys}
    if not local_block:
        widths = _score_widths(shape.head_dim, degree, sketch_size, learned_coefficients)
        kernel = uses_kernel_form(
            evaluation,
            heads=shape.groups,
            queries=shape.queries,
            keys=shape.keys,
            value_dim=shape.value_dim,
            widths=widths,
            causal=causal,
            chunk_size=chunk_size,
        )
        if not kernel:
            return feature_product(shape, features, phi, causal=causal, chunk_size=chunk_size)
        # The (L, S) form: the sketch s(x) without its symmetric square, then one score product
        # per squared term and the weights times V (the mask and normaliser are not matmuls).
        squares = 4 * sum(w * symmetric(w) for w in widths)
        sketch_cost = per_token - squares
        pairs = shape.queries * shape.keys
        terms = {
            "s(q)": sketch_cost * shape.queries,
            "s(k)": sketch_cost * shape.keys,
            **{f"scores ⟨·,·⟩ (width {w})": 2 * pairs * w for w in widths},
            "weights·V": 2 * pairs * shape.value_dim,
        }
        return count(shape, terms)
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


# ---------------------------------------------------------------- parameter-free mixers
def pool_flops(
    shape: CallShape,
    *,
    causal: bool = False,
    pool_size: int = 3,
    grid: tuple[int, int] | None = None,
) -> FlopCount:
    """PoolFormer's local average: no product; the window sums, L·Dv·w (w = k, or k² on a grid).

    ``grid``: the (h, w) map the tokens lie on (DETR's encoder sets it); None: a window of k
    consecutive tokens, the backend's behaviour without a grid (the latency benchmark's case).
    """
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
    """Lasso codes by K unrolled ADMM steps over the dictionary (see the module docstring).

    ``training``: the R random tokens join the dictionary (S' = S + R); in eval (the default,
    and the benchmark's mode) S' = S.

    Raises:
        ValueError: ``causal``; ``dictionary="values"`` with Dv != D (the backend refuses it).
    """
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


# ------------------------------------------------------------------------ one row a backend
# Every registered backend has a row (tests/lab/benchmarks/test_flops.py checks it).
FORMULAS: dict[str, Callable[..., FlopCount]] = {
    "linear": linear_flops,
    "mean": mean_flops,
    "optimization": optimization_flops,
    "performer": performer_flops,
    "polynomial": polynomial_flops,
    "polysketch": polysketch_flops,
    "pool": pool_flops,
    "softmax": softmax_flops,
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
    """The count of backend ``name`` with its constructor ``options`` (None: no formula).

    Options that do not change the count (eps, λ, ρ, the power, scale, norms, ...) are accepted
    and ignored; the rest default to the backend's own defaults. ``training`` and ``grid`` reach
    the backends they concern (optimization's random tokens, pool's spatial grid).

    Returns:
        None for a backend without a formula here (one registered by user code).
    """
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
