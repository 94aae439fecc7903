"""Performer / FAVOR+ attention (Choromanski et al. 2021, "Rethinking Attention with Performers",
arXiv 2009.14794).

softmax's kernel estimated by random features: ``exp(xᵀy) = E_ω[φ_ω(x) φ_ω(y)]``, ω ~ N(0, I),
then linear attention with φ. O(N·m·(D + Dv)) time, O(m·Dv) decode state. Inputs are pre-scaled
by D^{-1/4}, so φ(q)ᵀφ(k) estimates ``exp(qᵀk/√D)``: softmax attention with its default scale.

Shapes (see ``base.py``)::

    x: (B, H, N, D)   W: (m, D)   ->   φ(x): (B, H, N, F)   F = m, or 2m for hyperbolic/trig
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import Tensor

from attn_lightning.attention.base import check_choice, check_int
from attn_lightning.attention.feature_map import FeatureMapAttention
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS

KERNELS = ("positive", "hyperbolic", "trigonometric")
PROJECTIONS = ("orthogonal", "iid")


def draw_projection(
    num_features: int,
    head_dim: int,
    *,
    projection: str,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Random projection W: ``(m, D)`` float32 on CPU, rows ω with ω ~ N(0, I) marginally.

    ``orthogonal``: QR of Gaussian D×D blocks (rows orthonormal within a block), stacked for
    m > D with the last block truncated, each row rescaled by the norm of an independent Gaussian
    D-vector (χ_D) so its length is distributed as an i.i.d. Gaussian row's. ``iid``: plain
    Gaussian rows. ``generator=None`` draws from torch's global CPU RNG.
    """
    if projection not in PROJECTIONS:
        raise ValueError(f"unknown projection {projection!r}; allowed: {', '.join(PROJECTIONS)}")
    shape = (num_features, head_dim)
    if projection == "iid":
        return torch.randn(shape, generator=generator)
    blocks = []
    for _ in range(math.ceil(num_features / head_dim)):
        gauss = torch.randn(head_dim, head_dim, generator=generator)
        q, r = torch.linalg.qr(gauss)
        # Sign fix makes Q Haar-distributed (raw Householder QR is not); rows of Qᵀ = columns of Q.
        signs = torch.sign(torch.diagonal(r))
        signs[signs == 0] = 1.0
        blocks.append((q * signs).T)
    w = torch.cat(blocks)[:num_features]  # (m, D), unit rows
    norms = torch.randn(shape, generator=generator).norm(dim=-1, keepdim=True)  # (m, 1), χ_D
    return w * norms


class PerformerAttention(FeatureMapAttention):
    """FAVOR+: linear attention with random features estimating softmax's ``exp(qᵀk/√D)``.

    With x pre-scaled by D^{-1/4} and W's rows ω_1..ω_m (m = ``num_features``):

    * positive:      φ(x) = exp(Wx − ‖x‖²/2) / √m                         (F = m)
    * hyperbolic:    φ(x) = [exp(Wx), exp(−Wx)] · exp(−‖x‖²/2) / √(2m)      (F = 2m, lower variance)
    * trigonometric: φ(x) = [sin(Wx), cos(Wx)] · exp(‖x‖²/2) / √m          (F = 2m; kept for the
      record: its normaliser can be ≤ 0, giving unbounded or sign-flipped outputs)

    ``num_features`` is always m, the number of random projections; the feature dimension F is
    ``feature_dim`` (2m for hyperbolic and trigonometric, whose two halves share the projections).

    Query features are returned up to a positive per-token factor (the stabiliser below), which
    cancels in ``out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z``; key features are exactly the formula above.

    W is a persistent buffer (saved in checkpoints). Its first draw uses the global torch RNG, so
    ``seed_everything`` makes it identical on every DDP rank; ``redraw_features`` redraws it in
    place from a seeded generator (the feature-redraw callback calls it on a schedule).

    Args:
        head_dim: D.
        num_features: m, the number of random projections (paper default 256).
        kernel: ``positive``, ``hyperbolic`` or ``trigonometric`` (see above).
        projection: ``orthogonal`` (lower estimator MSE) or ``iid``.
        chunk_size: tokens per chunk in the causal kernel.
        eps: added to the normaliser (paper stabiliser 1e-6).
        implementation: the causal kernel, ``auto``, ``torch`` or ``fla`` (``feature_map``; not
            to be confused with ``kernel``, the random features' kind).
    """

    name = "performer"
    projection_matrix: Tensor  # (m, D) buffer

    def __init__(
        self,
        *,
        head_dim: int,
        num_features: int = 256,
        kernel: str = "positive",
        projection: str = "orthogonal",
        chunk_size: int = 64,
        eps: float = DEFAULT_EPS,
        implementation: str = "auto",
    ) -> None:
        super().__init__(
            head_dim=head_dim, chunk_size=chunk_size, eps=eps, implementation=implementation
        )
        self.kernel = check_choice("kernel", kernel, KERNELS, backend=self.name)
        self.projection = check_choice("projection", projection, PROJECTIONS, backend=self.name)
        what = "m, the number of random projections"
        self.num_features = check_int("num_features", num_features, minimum=1, what=what)
        if kernel == "trigonometric":
            warnings.warn(
                "performer kernel='trigonometric' (sin/cos random features) is kept for the "
                "record: its normaliser can be zero or negative, giving unbounded or sign-flipped "
                "attention weights; use kernel='positive' or 'hyperbolic' for training",
                UserWarning,
                stacklevel=2,
            )
        self.register_buffer(
            "projection_matrix",
            draw_projection(num_features, head_dim, projection=projection),
            persistent=True,
        )

    @property
    def feature_dim(self) -> int:
        """F, the length of φ(x): m for ``positive``, 2m for ``hyperbolic``/``trigonometric``."""
        return self.num_features if self.kernel == "positive" else 2 * self.num_features

    @torch.no_grad()
    def redraw_features(self, generator: torch.Generator | None = None) -> None:
        """Redraw W in place (same device and dtype) from ``generator`` (a CPU generator).

        Drawn on CPU and then moved, so equal seeds give equal W on every device and rank.
        ``None`` draws from torch's global RNG.
        """
        if generator is not None and generator.device.type != "cpu":
            raise ValueError(
                f"redraw_features needs a CPU torch.Generator (W is drawn on CPU, then moved), "
                f"got one on {generator.device}"
            )
        fresh = draw_projection(
            self.num_features, self.head_dim, projection=self.projection, generator=generator
        )
        self.projection_matrix.copy_(fresh)

    def feature_map(self, x: Tensor, *, is_query: bool) -> Tensor:
        scale = self.head_dim**-0.25  # absorbs softmax's 1/√D into the kernel
        w = self.projection_matrix.to(x.dtype) * scale  # (m, D): scaling W, not x, saves a pass
        proj = x @ w.T  # (B, H, N, m) = Wx' with x' = x·D^{-1/4}
        if self.kernel == "trigonometric":
            feats = torch.cat([proj.sin(), proj.cos()], dim=-1)  # (B, H, N, 2m)
            if not is_query:  # for queries exp(‖q‖²/2) is a per-token factor: it cancels
                feats = feats * (x.square().sum(dim=-1, keepdim=True) * (scale**2 / 2)).exp()
            return feats / math.sqrt(self.num_features)
        if self.kernel == "hyperbolic":
            proj = torch.cat([proj, -proj], dim=-1)  # (B, H, N, 2m)
        # log φ = Wx' − ‖x'‖²/2 − log √F: an in-place subtraction and exp, 3 passes over the
        # (B, H, N, F) tensor instead of 6 (scale x, subtract, max-shift, exp, divide by √F).
        half_sq_norm = x.square().sum(dim=-1, keepdim=True) * (scale**2 / 2)  # ‖x'‖²/2: (B,H,N,1)
        shift = half_sq_norm
        if is_query:
            # Per-token stabiliser: subtracting this token's own max over features multiplies
            # φ(q_i) by a positive constant, which cancels exactly in the ratio. It is taken per
            # token, never over the sequence: a max over positions would make causal outputs
            # depend on future tokens. Detached: the ratio does not depend on it. In value
            # max_f(Wx' − ‖x'‖²/2) = max_f(Wx') − ‖x'‖²/2, so the shift's value is max_f(Wx').
            # (hsn − hsn.detach() is exactly 0 in value and keeps the norm term's gradient, so the
            # gradients equal those of the textbook "φ, then subtract its detached max".)
            shift = proj.detach().amax(dim=-1, keepdim=True) + (shift - shift.detach())
        # Keys are not shifted: any per-token factor on φ(k_j) reweights key j, i.e. changes the
        # kernel. They cannot overflow: ωᵀx − ‖x‖²/2 = ‖ω‖²/2 − ‖x − ω‖²/2 ≤ ‖ω‖²/2 (same for −ω),
        # and ‖ω‖² ~ χ²_D exceeds 2·88.7 (float32 exp's limit) with probability < 1e-12 per row
        # for D ≤ 64 (< 1e-21 for D ≤ 32). Features run in float32 at least (``features``).
        # In place on the fresh matmul/cat output: their backward does not need it.
        return proj.sub_(shift + 0.5 * math.log(self.feature_dim)).exp_()

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, num_features={self.num_features}, "
            f"kernel={self.kernel!r}, projection={self.projection!r}, "
            f"chunk_size={self.chunk_size}, eps={self.eps}"
        )
