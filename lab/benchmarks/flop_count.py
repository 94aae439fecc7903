"""What a FLOP count of one attention call is, and the pieces several backends' formulas share.

``CallShape`` (the shapes of a call), ``FlopCount`` (its FLOPs by named term and kind),
``count`` (per-(batch, head) terms scaled to the call), ``feature_product`` (the feature-map
kernel of ``linear_kernels`` that linear, mean, Performer and PolySketch share), ``format_flops``.
The formulas themselves, one per backend, are ``flops``.

What is counted, and how:

* **matmul**: every matrix product the backend runs, as 2·m·n·k (a multiply-add is 2 FLOPs) —
  exactly what ``torch.utils.flop_counter.FlopCounterMode`` counts for ``mm``/``bmm``/``addmm``/
  ``baddbmm``/SDPA, which the tests check term by term. Products an implementation runs as a
  trick are counted as they run (PolySketch's symmetric square is two matmuls with fixed 0/1
  selection matrices, 4·r·F per token, where an element-wise gather would be F multiplies).
* **solve**: LAPACK factorisations and triangular solves, by their textbook operation counts
  (FlopCounterMode counts none of them): Cholesky of a D×D matrix D³/3, a Cholesky solve with
  n right-hand sides 2·D²·n (two triangular solves), a thin SVD of an m×n matrix (m ≥ n, U₁, Σ
  and V) 6·m·n² + 20·n³ (Golub & Van Loan's R-SVD count; LAPACK's divide-and-conquer differs by a
  constant factor).
* **other**: counted only where a backend has no product at all, so that its count is not 0:
  ``pool``'s window sums, one add per window element and output element.
* **ignored**: element-wise work (scaling, exp / pow / soft-threshold, softmax's max, sum and
  divide, ~5 ops per score; feature-map nonlinearities, LayerNorms, normaliser divisions),
  reductions that are not products (the normaliser Σφ(k), prefix sums over chunk states), masks,
  copies and random draws. For softmax they add ~5·L·S FLOPs against 2·L·S·(D + Dv).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# A term's name -> its FLOPs (whole call: B·H included).
Terms = Mapping[str, int]


@dataclass(frozen=True)
class CallShape:
    """The shapes of one call: ``q: (B, H, L, D)``, ``k: (B, H, S, D)``, ``v: (B, H, S, Dv)``."""

    batch: int
    heads: int
    queries: int
    keys: int
    head_dim: int
    value_dim: int

    def __post_init__(self) -> None:
        for name in ("batch", "heads", "queries", "keys", "head_dim", "value_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CallShape.{name} must be an int >= 1, got {value!r}")

    @classmethod
    def self_attention(
        cls, *, batch: int, heads: int, n: int, head_dim: int, value_dim: int | None = None
    ) -> CallShape:
        """L = S = n, Dv = D unless given (the latency protocols' shapes)."""
        dv = head_dim if value_dim is None else value_dim
        return cls(batch, heads, n, n, head_dim, dv)

    @property
    def groups(self) -> int:
        """B·H: the independent (batch, head) problems of the call."""
        return self.batch * self.heads


@dataclass(frozen=True)
class FlopCount:
    """Forward FLOPs of one call (all batches and heads), by named term and kind.

    ``matmul``: products as 2·m·n·k (what ``FlopCounterMode`` measures); ``solve``: LAPACK
    factorisations and triangular solves; ``other``: non-matmul work counted where a backend has
    no product (pool). See the module docstring for what is ignored.
    """

    matmul: Terms = field(default_factory=dict)
    solve: Terms = field(default_factory=dict)
    other: Terms = field(default_factory=dict)

    @property
    def matmul_total(self) -> int:
        return sum(self.matmul.values())

    @property
    def total(self) -> int:
        return self.matmul_total + sum(self.solve.values()) + sum(self.other.values())

    def describe(self) -> str:
        """``term = value`` for every nonzero term, largest first, in scientific notation."""
        terms = {**self.matmul, **self.solve, **self.other}
        ranked = sorted(terms.items(), key=lambda item: -item[1])
        return "; ".join(f"{name} = {value:.3g}" for name, value in ranked if value)


def count(
    shape: CallShape,
    matmul: Mapping[str, float],
    solve: Mapping[str, float] | None = None,
    other: Mapping[str, float] | None = None,
) -> FlopCount:
    """Per-(batch, head) terms × B·H, as ints (D³/3 is the only fractional count: rounded)."""

    def scale(terms: Mapping[str, float] | None) -> dict[str, int]:
        return {k: round(v * shape.groups) for k, v in (terms or {}).items()}

    return FlopCount(scale(matmul), scale(solve), scale(other))


def no_causal_form(name: str, causal: bool) -> None:
    """Raise for a causal count of a backend that has no causal form."""
    if causal:
        raise ValueError(f"attention {name!r} has no causal form: no causal FLOP count either")


def causal_padded(shape: CallShape, block: int) -> int:
    """N rounded up to a multiple of ``block``: the tokens a causal blocked kernel runs over.

    Raises:
        ValueError: L != S (causal attention is self-attention).
    """
    if shape.queries != shape.keys:
        raise ValueError(f"causal attention needs L == S, got L={shape.queries}, S={shape.keys}")
    return -(-shape.queries // block) * block


def visible_pairs(queries: int, keys: int, causal: bool) -> int:
    """(query, key) pairs a query sees: all L·S, or causal (query i sees keys j ≤ i)."""
    if not causal:
        return queries * keys
    if queries <= keys:
        return queries * (queries + 1) // 2
    return keys * (keys + 1) // 2 + (queries - keys) * keys


def symmetric(r: int) -> int:
    """r(r+1)/2: the features of ``symmetric_square`` of an r-vector."""
    return r * (r + 1) // 2


def feature_product(
    shape: CallShape,
    features: int,
    phi: Mapping[str, float],
    *,
    causal: bool,
    chunk_size: int,
) -> FlopCount:
    """φ(q), φ(k) (``phi``: per batch·head) + the shared kernel of ``linear_kernels``.

    Non-causal: ``2·S·F·Dv`` (state Σφ(k)vᵀ) ``+ 2·L·F·(Dv+1)`` (readout φ(q)ᵀ[S, z]); causal,
    chunked by C (N' = N rounded up to a multiple of C, E = Dv + 1: the normaliser rides along
    as one more column): ``2·N'·(C·F + C·E + 2·F·E)`` (in-chunk scores, in-chunk weights·[V,1],
    chunk states, cross-chunk readout).
    """
    f, dv = features, shape.value_dim
    e = dv + 1
    if not causal:
        terms = {
            **phi,
            "state φ(K)ᵀV": 2 * shape.keys * f * dv,
            "readout φ(Q)[S, z]": 2 * shape.queries * f * e,
        }
        return count(shape, terms)
    c = max(1, min(chunk_size, shape.queries))  # as ``causal_linear_attention``
    padded = causal_padded(shape, c)
    terms = {
        **phi,
        "chunk scores tril(Q_c K_cᵀ)": 2 * padded * c * f,
        "chunk weights·[V, 1]": 2 * padded * c * e,
        "chunk states K_cᵀ[V, 1]": 2 * padded * f * e,
        "cross-chunk readout Q_c S_{c-1}": 2 * padded * f * e,
    }
    return count(shape, terms)


def format_flops(value: float | None) -> str:
    """``1.23 GFLOP`` style, with the unit that keeps 1-3 digits before the point."""
    if value is None:
        return "n/a"
    for unit, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {unit}FLOP"
    return f"{value:.3g} FLOP"
