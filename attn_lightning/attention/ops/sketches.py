"""Sketch maps s: R^D -> R^r and ``symmetric_square`` (PolySketchFormer, arXiv 2310.01655).

From Kacham, Mirrokni, Zhong 2024, "PolySketchFormer". A sketch ``s`` with
``⟨s(q), s(k)⟩ ≈ ⟨q, k⟩²`` turns the degree-4 score into ``⟨s(q), s(k)⟩²``, which is
non-negative and is linearised exactly by ``φ(x) = s(x) ⊗ s(x)``. ``symmetric_square`` stores
only the r(r+1)/2 distinct entries of that tensor; the backend that uses them is
``polysketch.py``, which picks its map from ``SKETCHES``. Shapes::

    x: (B, H, N, D)  ->  s(x): (B, H, N, r)  ->  φ(x) = symmetric_square(s(x)): (B, H, N, r(r+1)/2)

Every map here computes in the dtype of its input (the caller passes float32 at least) and casts
its own parameters and buffers to it, so a model converted to bf16/fp16 weights still sketches in
float32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from attn_lightning.attention.options import check_int


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


class _FFSketch(nn.Module):
    """One level of a learned-sketch branch: LN → Linear(in, 8r) → GELU → Linear(8r, r).

    As in PolySketchFormer's public code (``FFSketch``): a learnable LN, then two dense layers
    without bias; ``bias=True`` gives the dense layers biases (this project's earlier form). Its
    parameters are cast to the input's dtype.
    """

    def __init__(self, in_dim: int, sketch_size: int, *, bias: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(in_dim)
        self.fc1 = nn.Linear(in_dim, 8 * sketch_size, bias=bias)
        self.fc2 = nn.Linear(8 * sketch_size, sketch_size, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        dt = x.dtype
        weight, bias = self.norm.weight.to(dt), self.norm.bias.to(dt)
        x = F.layer_norm(x, self.norm.normalized_shape, weight, bias, self.norm.eps)
        x = F.gelu(F.linear(x, self.fc1.weight.to(dt), _cast(self.fc1.bias, dt)))  # (…, 8r)
        return F.linear(x, self.fc2.weight.to(dt), _cast(self.fc2.bias, dt))  # (…, r)


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

    def _load_from_state_dict(self, state_dict: dict, prefix: str, *args: Any) -> None:
        # Earlier single-level checkpoints stored ``branch1.norm.weight``; one level is now
        # ``branch1.0.norm.weight``. Rename so they load with ``sketch_levels=1, sketch_bias=True``.
        for branch in ("branch1", "branch2"):
            for key in [k for k in state_dict if k.startswith(f"{prefix}{branch}.")]:
                rest = key[len(f"{prefix}{branch}.") :]
                if rest.split(".")[0] in ("norm", "fc1", "fc2"):
                    state_dict[f"{prefix}{branch}.0.{rest}"] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args)

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
