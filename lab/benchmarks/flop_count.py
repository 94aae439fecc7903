"""What a FLOP count is: the shape of one attention call, the count by named term, and the
pieces the per-backend formulas of ``flops`` share (the feature-map kernel's terms, visible and
tiled pairs,
``symmetric_square``'s width). Conventions: ``flops``'s docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from attn_lightning.attention.ops import power_exact

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
    """Forward FLOPs of one call (all batches and heads) by named term: ``matmul`` (2·m·n·k),
    ``solve`` (LAPACK), ``other`` (non-matmul work where a backend has no product: pool)."""

    matmul: Terms = field(default_factory=dict)
    solve: Terms = field(default_factory=dict)
    other: Terms = field(default_factory=dict)

    @property
    def matmul_total(self) -> int:
        return sum(self.matmul.values())

    @property
    def total(self) -> int:
        return self.matmul_total + sum(self.solve.values()) + sum(self.other.values())


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
    """N rounded up to a multiple of ``block`` (the tokens a causal blocked kernel runs over);
    ValueError when L != S (causal attention is self-attention)."""
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


def tiled_pairs(queries: int, keys: int, causal: bool) -> int:
    """(query, key) pairs ``power_exact``'s tiles compute on the CPU: all L·S; causal, query blocks
    of ``QUERY_BLOCK`` rows against the keys up to their last row (the whole square when L is
    one block)."""
    block = power_exact.QUERY_BLOCK
    if not causal or queries <= block:
        return queries * keys
    return sum(
        (min(i + block, queries) - i) * min(i + block, keys) for i in range(0, queries, block)
    )


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
    """φ(q), φ(k) (``phi``: per batch·head) + the kernel of ``linear_kernels`` that linear,
    mean, Performer and PolySketch share: a state and a readout, or causal chunks of C."""
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
