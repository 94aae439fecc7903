"""Sketch maps s: R^D -> R^r and ``symmetric_square`` (PolySketchFormer, arXiv 2310.01655).

From Kacham, Mirrokni, Zhong 2024, "PolySketchFormer". A sketch ``s`` with
``⟨s(q), s(k)⟩ ≈ ⟨q, k⟩²`` turns the degree-4 score into ``⟨s(q), s(k)⟩²``, which is
non-negative and is linearised exactly by ``φ(x) = s(x) ⊗ s(x)``. ``symmetric_square`` stores
only the r(r+1)/2 distinct entries of that tensor; the backend that uses them is
``polysketch.py``, which picks its map from ``SKETCHES``. Shapes::

    x: (B, H, N, D)  ->  s(x): (B, H, N, r)  ->  φ(x) = symmetric_square(s(x)): (B, H, N, r(r+1)/2)

The learned sketch's levels run on CPU in chunks of tokens that recompute their hidden
activation in backward (``chunked_sketch_level``): the same outputs without a level's whole
(tokens, 8r) hidden tensor, which glibc maps and zeroes afresh at each allocation above 32 MiB.

Every map here computes in the dtype of its input (the caller passes float32 at least) and casts
its own parameters and buffers to it, so a model converted to bf16/fp16 weights still sketches in
float32.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from attn_lightning.attention.base import check_int


def symmetric_square(s: Tensor) -> Tensor:
    """Compressed ``s ⊗ s``: ``[s_a s_b · (√2 if a < b else 1)]_{a ≤ b}``, so that
    ``⟨symmetric_square(s), symmetric_square(t)⟩ = ⟨s, t⟩²`` exactly.

    Half the r² entries of the full Kronecker feature (the off-diagonal pairs appear twice in
    ``⟨s⊗s, t⊗t⟩``, hence the √2), for the same inner product. ``(..., r) -> (..., r(r+1)/2)``.

    The pairs are gathered by two small matmuls with fixed 0/1 (and √2) selection matrices
    rather than by indexing: on CPU, advanced indexing and its scatter-add backward were 40% of
    a sketch layer's time, the GEMMs (2·r per feature) a few percent.
    """
    first, second = _selection(s.shape[-1], s.dtype, s.device)
    return (s @ first) * (s @ second)


def _selection(r: int, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(r, r(r+1)/2)`` matrices picking s_a and √2-or-1 · s_b for each pair a ≤ b."""
    rows, cols = torch.triu_indices(r, r)
    pairs = torch.arange(rows.numel())
    first = torch.zeros(r, rows.numel(), dtype=dtype)
    second = torch.zeros(r, rows.numel(), dtype=dtype)
    first[rows, pairs] = 1.0
    # Built in s's dtype: a float32 √2 would be off in float64.
    weight = torch.full(rows.shape, math.sqrt(2.0), dtype=dtype)
    weight[rows == cols] = 1.0
    second[cols, pairs] = weight
    return first.to(device), second.to(device)


class RandomPolySketch(nn.Module):
    """Degree-2 Gaussian tensor sketch ``s(x) = √r · (x S1) ∘ (x S2)``, S1, S2 ~ N(0, 1)/√r.

    Unbiased: each coordinate m gives ``E[(qS1)_m (kS1)_m] E[(qS2)_m (kS2)_m] = (⟨q,k⟩/r)²``, so
    the r coordinates sum to ``⟨q,k⟩²/r`` and the √r in front (the 1/√r of Ahle et al.'s sketch of
    ``x ⊗ x``, written with S scaled rather than G ~ N(0, 1)) brings the mean to ``⟨q,k⟩²``; the
    relative variance falls as 1/r. O(N·D·r).

    S1 and S2 are persistent buffers (saved in checkpoints, moved with the module); the first
    draw uses the global torch RNG, ``draw`` redraws them from a generator.

    Args:
        head_dim: D.
        sketch_size: r.
    """

    s1: Tensor  # (D, r) buffer
    s2: Tensor  # (D, r) buffer

    def __init__(self, *, head_dim: int, sketch_size: int) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.sketch_size = sketch_size
        self.register_buffer("s1", self._gaussian(None), persistent=True)  # (D, r)
        self.register_buffer("s2", self._gaussian(None), persistent=True)  # (D, r)

    def _gaussian(self, generator: torch.Generator | None) -> Tensor:
        shape = (self.head_dim, self.sketch_size)
        return torch.randn(shape, generator=generator) / math.sqrt(self.sketch_size)

    @torch.no_grad()
    def draw(self, generator: torch.Generator | None = None) -> None:
        """Redraw S1 then S2 on CPU from ``generator`` (global RNG if None), copied in place so
        the buffers keep their device and dtype."""
        if generator is not None and generator.device.type != "cpu":
            raise ValueError(
                f"the sketch is drawn on CPU then moved: pass a CPU torch.Generator, "
                f"got one on {generator.device}"
            )
        self.s1.copy_(self._gaussian(generator))
        self.s2.copy_(self._gaussian(generator))

    def forward(self, x: Tensor) -> Tensor:
        s1, s2 = self.s1.to(x.dtype), self.s2.to(x.dtype)
        return (x @ s1) * (x @ s2) * math.sqrt(self.sketch_size)  # (B, H, N, r)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, sketch_size={self.sketch_size}"


# A learned-sketch level's (rows, 8r) hidden activation is computed this many elements at a time
# on CPU (2 MiB in float32). Whole, it is 52 MB at the reversal study's shape (64·4·100 rows ×
# 512), above glibc's largest mmap threshold (32 MiB): each is mapped afresh and zeroed page by
# page, ~64 of them and ~820k page faults a training step. A few MiB comes back from the heap,
# stays in cache between the GEMM and the GELU, and still makes GEMMs of ~1,000 rows.
CHUNK_ELEMENTS = 1 << 19

LevelParams = tuple[Tensor, Tensor, Tensor, Tensor | None, Tensor, Tensor | None]
"""A level's (LN weight, LN bias, fc1 weight, fc1 bias, fc2 weight, fc2 bias), in x's dtype."""


def sketch_level(x: Tensor, params: LevelParams, eps: float) -> Tensor:
    """One level, whole: ``Linear(GELU(Linear(LN(x))))``, ``(…, in) -> (…, r)`` via ``(…, 8r)``."""
    norm_weight, norm_bias, w1, b1, w2, b2 = params
    x = F.layer_norm(x, (x.shape[-1],), norm_weight, norm_bias, eps)
    return F.linear(F.gelu(F.linear(x, w1, b1)), w2, b2)  # (…, 8r) -> (…, r)


def chunked_sketch_level(
    x: Tensor, params: LevelParams, eps: float, *, rows: int | None = None
) -> Tensor:
    """``sketch_level`` at most ``rows`` rows (tokens of every batch and head) at a time,
    recomputing the hidden activation in backward: it never exists whole, nothing 8r wide is saved.

    The same outputs as ``sketch_level`` (each row's arithmetic is unchanged); the gradients of
    the parameters sum the chunks' in turn, so they differ from the whole form's by float32
    rounding. ``rows`` defaults to ``CHUNK_ELEMENTS // 8r``. No double backward.
    """
    if rows is None:
        rows = max(1, CHUNK_ELEMENTS // params[2].shape[0])
    check_int("rows", rows, minimum=1, what="rows per chunk")
    return _ChunkedLevel.apply(x, rows, eps, *params)


def _chunks(total: int, rows: int) -> list[slice]:
    """``total`` rows in ⌈total/rows⌉ chunks of near-equal size (they differ by at most one row):
    no ragged last chunk of a few rows, which a BLAS may multiply by another (small-M) kernel
    whose rounding differs from the whole product's."""
    count = -(-total // rows)
    bounds = [i * total // count for i in range(count + 1)] if count else [0]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


class _ChunkedLevel(torch.autograd.Function):
    """``chunked_sketch_level``. A custom Function, not ``torch.utils.checkpoint`` per chunk:
    backward recomputes a chunk's LN and fc1 and calls the kernels autograd would
    (``gelu_backward``, ``native_layer_norm_backward``, GEMMs) itself, chunk after chunk, with
    no nested autograd pass, saved-tensor hooks or RNG copies per chunk (a nested
    ``autograd.grad`` per chunk cost 20–30 % more per level at the study's shape); dx goes into
    one tensor, the weights' gradients accumulate in place (``addmm_``)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, rows: int, eps: float, *args: Tensor | None) -> Tensor:
        params = cast(LevelParams, args)
        flat = x.reshape(-1, x.shape[-1])  # (M, in), M = B·H·N
        out = flat.new_empty(flat.shape[0], params[4].shape[0])  # (M, r)
        with torch.autocast(x.device.type, enabled=False):  # in x's dtype, as backward recomputes
            for chunk in _chunks(flat.shape[0], rows):
                out[chunk] = sketch_level(flat[chunk], params, eps)
        ctx.rows, ctx.eps = rows, eps
        ctx.save_for_backward(x, *args)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, norm_weight, norm_bias, w1, b1, w2, b2 = ctx.saved_tensors
        wants = ctx.needs_input_grad  # x, rows, eps, then the six parameters
        params = (norm_weight, norm_bias, w1, b1, w2, b2)
        sums = [
            torch.zeros_like(p) if p is not None and want else None
            for p, want in zip(params, wants[3:])
        ]
        d_norm_weight, d_norm_bias, d_w1, d_b1, d_w2, d_b2 = sums
        norm_mask = [wants[0], wants[3], wants[4]]  # dx, d LN weight, d LN bias
        flat = x.reshape(-1, x.shape[-1])  # (M, in)
        grad = grad.reshape(flat.shape[0], -1)  # (M, r)
        dx = torch.empty_like(flat) if wants[0] else None
        width = [flat.shape[-1]]
        with torch.autocast(x.device.type, enabled=False):
            for chunk in _chunks(flat.shape[0], ctx.rows):
                xc, g_out = flat[chunk], grad[chunk]  # (m, in), (m, r)
                xn, mean, rstd = torch.ops.aten.native_layer_norm(
                    xc, width, norm_weight, norm_bias, ctx.eps
                )
                hidden = F.linear(xn, w1, b1)  # (m, 8r), recomputed
                if d_w2 is not None:
                    d_w2.addmm_(g_out.t(), F.gelu(hidden))
                if d_b2 is not None:
                    d_b2.add_(g_out.sum(0))
                d_hidden = torch.ops.aten.gelu_backward(g_out @ w2, hidden)  # (m, 8r)
                if d_w1 is not None:
                    d_w1.addmm_(d_hidden.t(), xn)
                if d_b1 is not None:
                    d_b1.add_(d_hidden.sum(0))
                if not any(norm_mask):
                    continue
                d_xc, d_nw, d_nb = torch.ops.aten.native_layer_norm_backward(
                    d_hidden @ w1, xc, width, mean, rstd, norm_weight, norm_bias, norm_mask
                )
                if dx is not None:
                    dx[chunk] = d_xc
                if d_norm_weight is not None:
                    d_norm_weight.add_(d_nw)
                if d_norm_bias is not None:
                    d_norm_bias.add_(d_nb)
        return (None if dx is None else dx.view_as(x), None, None, *sums)


class _FFSketch(nn.Module):
    """One level of a learned-sketch branch: LN → Linear(in, 8r) → GELU → Linear(8r, r).

    As in PolySketchFormer's public code (``FFSketch``): a learnable LN, then two dense layers
    without bias; ``bias=True`` gives the dense layers biases (this project's earlier form). Its
    parameters are cast to the input's dtype. On CPU the level runs in chunks
    (``chunked_sketch_level``); elsewhere whole: a caching allocator (CUDA's) reuses its blocks,
    so there is nothing to avoid, and keeping the hidden activation is cheaper than recomputing.
    """

    def __init__(self, in_dim: int, sketch_size: int, *, bias: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(in_dim)
        self.fc1 = nn.Linear(in_dim, 8 * sketch_size, bias=bias)
        self.fc2 = nn.Linear(8 * sketch_size, sketch_size, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        dt = x.dtype
        params = (
            self.norm.weight.to(dt),
            self.norm.bias.to(dt),
            self.fc1.weight.to(dt),
            _cast(self.fc1.bias, dt),
            self.fc2.weight.to(dt),
            _cast(self.fc2.bias, dt),
        )
        if x.device.type == "cpu":
            return chunked_sketch_level(x, params, self.norm.eps)
        return sketch_level(x, params, self.norm.eps)


def _cast(bias: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    return None if bias is None else bias.to(dtype)


class LearnedPolySketch(nn.Module):
    """Learned stand-in for the degree-2 sketch: ``s(x) = tanh(x1 ∘ x2 / √r) · √r``, where x1 and
    x2 are two independent branches, each ``levels`` ``_FFSketch`` levels (D → r, then r → r).

    The paper's structure (PolySketchFormer, its public ``SketchLayer``): two levels, dense layers
    without bias, each level starting with its own learnable LN, so the backend applies no other
    norm before it. The product of two branches mimics the (x S1) ∘ (x S2) structure of the random
    sketch; tanh bounds each coordinate by √r so ``⟨s(q), s(k)⟩² ≤ r⁴`` cannot overflow. Shared by
    queries and keys (one module), so the score stays symmetric. O(N·(D + r)·8r) per level.

    Args:
        head_dim: D.
        sketch_size: r.
        levels: levels per branch (paper: 2; this project's earlier form: 1).
        bias: biases in the dense layers (paper: none; earlier form: True).
    """

    def __init__(
        self, *, head_dim: int, sketch_size: int, levels: int = 2, bias: bool = False
    ) -> None:
        super().__init__()
        check_int("sketch_levels", levels, minimum=1, what="levels per branch")
        self.sketch_size = sketch_size
        self.levels = levels
        dims = [head_dim] + [sketch_size] * (levels - 1)
        self.branch1 = nn.Sequential(*(_FFSketch(d, sketch_size, bias=bias) for d in dims))
        self.branch2 = nn.Sequential(*(_FFSketch(d, sketch_size, bias=bias) for d in dims))

    def forward(self, x: Tensor) -> Tensor:
        root_r = math.sqrt(self.sketch_size)
        return torch.tanh(self.branch1(x) * self.branch2(x) / root_r) * root_r  # (B, H, N, r)


# (kind, degree) -> the map s, with φ = sym(s ⊗ s): the pairs ``polysketch`` supports. Each
# takes ``head_dim, sketch_size, levels, bias`` and uses those it needs.
SKETCHES: dict[tuple[str, int], Callable[..., nn.Module]] = {
    ("random", 2): lambda **_: nn.Identity(),  # ⟨sym(q'⊗q'), sym(k'⊗k')⟩ = ⟨q', k'⟩² exactly
    ("random", 4): lambda *, head_dim, sketch_size, **_: RandomPolySketch(
        head_dim=head_dim, sketch_size=sketch_size
    ),
    ("learned", 4): LearnedPolySketch,
}
