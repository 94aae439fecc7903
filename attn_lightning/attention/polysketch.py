"""PolySketch attention: the polynomial score linearised by a sketch, in linear time.

Kacham, Mirrokni, Zhong, "PolySketchFormer", ICML 2024, arXiv 2310.01655::

    sim_ij = ⟨s(q'_i), s(k'_j)⟩² ≈ ⟨q'_i, k'_j⟩⁴,   out_i = Σ_j sim_ij v_j / (1 + Σ_j sim_ij)

with ``x' = LN(x) · D^{-1/4}`` as in ``polynomial`` (``bounded_inputs``) and the sketch ``s``
of ``sketches.py``. ``sim = ⟨φ(q'), φ(k')⟩`` with ``φ = symmetric_square(s)``, so it runs through
the shared linear-attention kernels with normaliser offset 1: O(N·r²·Dv) time, O(r²·Dv) decode
state. Degree 2 uses ``s = identity``: ``⟨sym(q'⊗q'), sym(k'⊗k')⟩ = ⟨q', k'⟩²`` exactly.

Shapes (see ``base.py``)::

    q: (B, H, L, D)  ->  s(q'): (B, H, L, r)  ->  φ(q'): (B, H, L, r(r+1)/2)  (D(D+1)/2 for p=2)
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.linear_kernels import DEFAULT_EPS
from attn_lightning.attention.polynomial import bounded_inputs
from attn_lightning.attention.sketches import LearnedPolySketch, RandomPolySketch, symmetric_square

SKETCH_KINDS = ("random", "learned")

# (sketch, degree) -> the map s, with φ = sym(s ⊗ s): the pairs this backend supports.
SKETCHES: dict[tuple[str, int], Callable[..., nn.Module]] = {
    ("random", 2): lambda **_: nn.Identity(),  # ⟨sym(q'⊗q'), sym(k'⊗k')⟩ = ⟨q', k'⟩² exactly
    ("random", 4): RandomPolySketch,
    ("learned", 4): LearnedPolySketch,
}


def _supported_degrees(kind: str) -> str:
    return ", ".join(str(p) for k, p in sorted(SKETCHES) if k == kind)


class PolySketchAttention(FeatureMapAttention):
    """Linear attention with ``φ(x) = symmetric_square(s(x'))``, estimating power attention.

    * ``sketch="random"``: the Gaussian tensor sketch, an unbiased estimate of ``⟨q', k'⟩⁴``
      whose relative error falls as 1/√r. S1, S2 are persistent buffers (``sketch.s1``,
      ``sketch.s2``); the first draw uses the global torch RNG, ``redraw_features`` redraws them
      from a seeded generator.
    * ``sketch="learned"``: a learned stand-in for s (degree 4 only), trained with the model.

    Features run in float32 at least with autocast off; the output has v's dtype.

    Args:
        head_dim: D.
        sketch: ``random`` or ``learned`` (see above).
        degree: p. random: 2 (exact, no randomness) or 4; learned: 4.
        sketch_size: r, the sketch width (paper: 32 or 64); φ has r(r+1)/2 features.
        normalize: layer-norm q and k before the D^{-1/4} scale (keeps the entries bounded).
        chunk_size: tokens per chunk in the causal kernel.
        eps: added to the normaliser.
    """

    name = "polysketch"
    normalizer_offset = 1.0  # the power kernel's "1 +": a phantom key of similarity 1, value 0

    def __init__(
        self,
        *,
        head_dim: int,
        sketch: str = "random",
        degree: int = 4,
        sketch_size: int = 32,
        normalize: bool = True,
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
    ) -> None:
        super().__init__(head_dim=head_dim, chunk_size=chunk_size, eps=eps)
        if sketch not in SKETCH_KINDS:
            raise ValueError(
                f"unknown sketch {sketch!r} for attention 'polysketch'; "
                f"allowed: {', '.join(SKETCH_KINDS)}"
            )
        if isinstance(sketch_size, bool) or not isinstance(sketch_size, int) or sketch_size <= 0:
            raise ValueError(f"sketch_size must be a positive int (r), got {sketch_size!r}")
        if (
            isinstance(degree, bool)
            or not isinstance(degree, int)
            or (sketch, degree) not in SKETCHES
        ):
            raise ValueError(
                f"sketch={sketch!r} supports degree {_supported_degrees(sketch)}, got "
                f"degree={degree!r}; the exact 'polynomial' attention takes any even degree"
            )
        self.sketch_kind = sketch
        self.degree = degree
        self.sketch_size = sketch_size
        self.normalize = bool(normalize)
        # Named ``sketch`` so the buffers keep the keys of older checkpoints (``sketch.s1``).
        self.sketch = SKETCHES[(sketch, degree)](head_dim=head_dim, sketch_size=sketch_size)

    def normalize_inputs(self, x: Tensor) -> Tensor:
        """``x' = LN(x) · D^{-1/4}`` (no affine LN; ``normalize=False``: ``x · D^{-1/4}``)."""
        return bounded_inputs(x, normalize=self.normalize)

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        """φ(x) = sym(s(x') ⊗ s(x')), so that ``⟨φ(q), φ(k)⟩ = ⟨s(q'), s(k')⟩²``."""
        return symmetric_square(self.sketch(self.normalize_inputs(x)))

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Redraw the random sketch S1, S2 in place from a CPU ``generator`` (global RNG if None).

        Drawn on CPU then copied to the buffers' device and dtype, so equal seeds give equal
        sketches on every device and rank. A no-op for the learned and the degree-2 sketch.
        """
        if isinstance(self.sketch, RandomPolySketch):
            self.sketch.draw(generator)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, sketch={self.sketch_kind!r}, degree={self.degree}, "
            f"sketch_size={self.sketch_size}, normalize={self.normalize}, "
            f"chunk_size={self.chunk_size}, eps={self.eps}"
        )
