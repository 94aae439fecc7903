"""Optimization-based attention: each query is a sparse combination of the keys (lasso by ADMM).

"Optimizing Attention" (Ackermann et al., ICLR 2025 submission). The paper's body was not
available; this is **our reading** of it, the reconstructed formulation of ``docs/methods.md``,
with every knob exposed:

    c*(q) = argmin_c ½‖q − Dm c‖² + λ‖c‖₁,   w_j = |z_j|^p / Σ_l |z_l|^p,   out = Σ_j w_j v_j

where the dictionary ``Dm = [k_1 … k_S]`` (D×S) holds the keys as columns and ``z`` is the sparse
iterate after K unrolled steps of scaled ADMM, run for all queries at once:

    C ← M (DmᵀQ + ρ(Z − U)),   Z ← soft(C + U, λ/ρ),   U ← U + C − Z,   M = (DmᵀDm + ρI)⁻¹.

M is never formed as S×S: by Woodbury ``M X = (1/ρ)[X − Dmᵀ (ρI + DmDmᵀ)⁻¹ Dm X]`` needs one D×D
factorisation per batch×head (Cholesky, or a thin SVD of Dm). Cost O(S·D² + K·L·S·D) time,
O(K·L·S) memory for autograd (every iterate is kept); no trainable parameters, which is the
point: the 3·D² projection parameters of a layer are what the method saves, not FLOPs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import Attention, accumulation_dtype

SOLVERS = ("woodbury", "svd")


def _is_int(x: object) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


class OptimizationAttention(Attention):
    """Attention weights from a lasso code of each query over the keys (unrolled ADMM).

    Masking and options, all exact in the formulation above:

    - ``key_padding_mask``: a padded key becomes a zero dictionary column and its coefficient is
      pinned to 0. A zero column is decoupled in DmᵀDm + ρI, so the other coefficients are those of
      the lasso over the real keys alone, i.e. padding equals dropping the keys.
    - ``exclude_self`` (self-attention, L == S): the prox step also zeroes z_ii. Projection onto
      {z_i = 0} is the exact ADMM prox for the constrained lasso, so a query cannot explain itself
      by its own key (otherwise q_i = k_i gives the trivial code c = (1 − λ) e_i).
    - ``random_tokens`` R > 0, training only: R Gaussian columns at the keys' scale join the
      dictionary; their coefficients help explain q but carry no value and are dropped before the
      weights. Eval adds none, so eval is deterministic.

    Causal attention is not supported (``supports_causal = False``): M = (DmᵀDm + ρI)⁻¹ couples
    every key, so the code of query i depends on keys j > i even if z_j is pinned to 0. A causal
    form needs one lasso per prefix dictionary (a factorisation per position), not a mask.

    Args:
        head_dim: D.
        iterations: K, the number of unrolled ADMM steps (>= 1).
        lam: λ >= 0, the l1 weight; with ``normalize`` it is relative to unit-norm q and k.
        rho: ρ > 0, the ADMM penalty (also the ridge that makes M well defined).
        power: p > 0 of the weights ``|z|^p`` (5 in the paper, in place of softmax's exp).
        signed: weights ``sign(z_j)|z_j|^p / Σ|z_l|^p`` (may be negative) instead of ``|z_j|^p``.
        random_tokens: R >= 0 random dictionary columns added in training mode.
        exclude_self: pin z_ii to 0 (needs L == S).
        solver: ``"woodbury"`` (Cholesky of ρI + DmDmᵀ) or ``"svd"`` (thin SVD of Dm).
        normalize: L2-normalise q and k per token first, so λ has a scale-free meaning (a code
            coefficient is a fraction of a unit query) and the keys are comparable atoms.
    """

    name = "optimization"
    supports_causal = False
    supports_recurrence = False

    def __init__(
        self,
        *,
        head_dim: int,
        iterations: int = 10,
        lam: float = 0.1,
        rho: float = 1.0,
        power: float = 5.0,
        signed: bool = False,
        random_tokens: int = 0,
        exclude_self: bool = False,
        solver: str = "woodbury",
        normalize: bool = True,
    ) -> None:
        super().__init__(head_dim=head_dim)
        if not _is_int(iterations) or iterations < 1:
            raise ValueError(f"iterations must be an int >= 1, got {iterations!r}")
        if not lam >= 0:
            raise ValueError(f"lam must be >= 0, got {lam!r}")
        if not rho > 0:
            raise ValueError(f"rho must be > 0, got {rho!r}")
        if not power > 0:
            raise ValueError(f"power must be > 0, got {power!r}")
        if solver not in SOLVERS:
            raise ValueError(f"unknown solver {solver!r}; allowed: {', '.join(SOLVERS)}")
        if not _is_int(random_tokens) or random_tokens < 0:
            raise ValueError(f"random_tokens must be an int >= 0, got {random_tokens!r}")
        self.iterations = iterations
        self.lam = float(lam)
        self.rho = float(rho)
        self.power = float(power)
        self.signed = bool(signed)
        self.random_tokens = random_tokens
        self.exclude_self = bool(exclude_self)
        self.solver = solver
        self.normalize = bool(normalize)

    # ------------------------------------------------------------------ public helpers
    def sparse_codes(
        self, q: Tensor, k: Tensor, *, key_padding_mask: Tensor | None = None
    ) -> Tensor:
        """The sparse ADMM iterate Z after K steps, over the real keys only.

        Args:
            q: ``(B, H, L, D)``; k: ``(B, H, S, D)``; key_padding_mask: ``(B, S)``, True = real.

        Returns:
            ``(B, H, L, S)`` in the compute dtype (float32 at least); row i is the code of q_i,
            exactly 0 on padded keys (and on the diagonal with ``exclude_self``).
        """
        dtype = accumulation_dtype(torch.promote_types(q.dtype, k.dtype))
        with torch.autocast(device_type=q.device.type, enabled=False):
            return self._codes(q.to(dtype), k.to(dtype), key_padding_mask)

    # ------------------------------------------------------------------ contract
    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None
    ) -> Tensor:
        dtype = accumulation_dtype(torch.promote_types(torch.result_type(q, k), v.dtype))
        with torch.autocast(device_type=q.device.type, enabled=False):
            z = self._codes(q.to(dtype), k.to(dtype), key_padding_mask)  # (B, H, L, S)
            w = self._weights(z)  # (B, H, L, S)
            out = w @ v.to(dtype)  # (B, H, L, Dv)
        return out.to(v.dtype)

    # ------------------------------------------------------------------ the method
    def _codes(self, q: Tensor, k: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        b, _, l_q, _ = q.shape
        s = k.shape[2]
        if self.exclude_self and l_q != s:
            raise ValueError(
                f"exclude_self=True needs self-attention with L == S, got L={l_q}, S={s}"
            )
        if self.normalize:
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        real = None if key_padding_mask is None else key_padding_mask[:, None, :, None]  # (B,1,S,1)
        if real is not None:
            # where, not multiply: a padded key's values (even inf/NaN) must not reach the solve.
            k = torch.where(real, k, torch.zeros((), dtype=k.dtype, device=k.device))
        atoms = k  # (B, H, S', D): the dictionary's columns, as rows
        if self.training and self.random_tokens > 0:
            atoms = torch.cat([k, self._random_atoms(k, key_padding_mask)], dim=2)

        # Which coefficients may be nonzero: the prox step projects the rest onto 0.
        keep = torch.ones(1, 1, l_q, atoms.shape[2], dtype=torch.bool, device=q.device)
        if key_padding_mask is not None:
            keep = keep.repeat(b, 1, 1, 1)
            keep[..., :s] &= key_padding_mask[:, None, None, :]
        if self.exclude_self:
            keep[..., :s] &= ~torch.eye(l_q, s, dtype=torch.bool, device=q.device)

        try:
            pt = self._ridge_factor(atoms)  # (B, H, D, S') = (ρI + DmDmᵀ)⁻¹ Dm
        except torch.linalg.LinAlgError as err:
            if bool(torch.isfinite(atoms).all()):
                raise
            # The bare message ("not positive-definite") hides the cause: say it.
            raise ValueError(
                f"attention {self.name!r}: the {self.solver} solve failed because k holds NaN "
                f"or inf at an unmasked position ({err}); turn on "
                f"attn_lightning.attention.set_check_finite(True) to find the first one"
            ) from err

        def apply_m(x: Tensor) -> Tensor:  # x: (B, H, L, S') rows -> rows of M applied to each
            return (x - (x @ atoms) @ pt) / self.rho

        dtq = q @ atoms.transpose(-1, -2)  # (B, H, L, S') = (DmᵀQ)ᵀ
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        z = torch.zeros_like(dtq)
        u = torch.zeros_like(dtq)
        for _ in range(self.iterations):
            c = apply_m(dtq + self.rho * (z - u))
            z = torch.where(keep, F.softshrink(c + u, self.lam / self.rho), zero)
            u = u + c - z
        return z[..., :s]  # random-token coefficients carry no value

    def _ridge_factor(self, atoms: Tensor) -> Tensor:
        """``(ρI + DmDmᵀ)⁻¹ Dm`` as (B, H, D, S'): the D×D half of Woodbury."""
        d = atoms.shape[-1]
        eye = torch.eye(d, dtype=atoms.dtype, device=atoms.device)
        gram = self.rho * eye + atoms.transpose(-1, -2) @ atoms  # (B, H, D, D)
        if self.solver == "woodbury":
            return torch.cholesky_solve(atoms.transpose(-1, -2), torch.linalg.cholesky(gram))
        # SVD Dm = V diag(s) Uᵀ gives (ρI + DmDmᵀ)⁻¹ = (1/ρ)[I − V diag(s²/(s²+ρ)) Vᵀ]. Its
        # gradient is taken analytically (d G⁻¹ = −G⁻¹ dG G⁻¹) through a term that is exactly 0
        # in value: the SVD's own backward is undefined at repeated singular values, which
        # padding (zero columns) and fully masked rows produce.
        with torch.no_grad():
            _, sv, vh = torch.linalg.svd(atoms, full_matrices=False)  # vh: (B, H, r, D)
            shrink = sv.square() / (sv.square() + self.rho)
            inv0 = (eye - vh.transpose(-1, -2) @ (shrink[..., None] * vh)) / self.rho
        inv = inv0 + inv0 @ (gram.detach() - gram) @ inv0
        return inv @ atoms.transpose(-1, -2)

    def _random_atoms(self, k: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        """R Gaussian atoms per batch×head at the real keys' RMS norm (unit norm if normalised)."""
        b, h, _, d = k.shape
        noise = torch.randn(b, h, self.random_tokens, d, dtype=k.dtype, device=k.device)
        if self.normalize:
            return F.normalize(noise, dim=-1)
        with torch.no_grad():  # the noise's scale is not something to learn through
            # Padded keys are already zero rows, so only the real ones add to the sum.
            count = (
                k.new_full((b,), k.shape[2])
                if key_padding_mask is None
                else (key_padding_mask.sum(-1).to(k.dtype))
            )
            sq = k.square().sum((-1, -2), keepdim=True)  # (B, H, 1, 1)
            rms = (sq / count.clamp_min(1).view(b, 1, 1, 1)).sqrt()
        return noise * rms / d**0.5

    def _weights(self, z: Tensor) -> Tensor:
        """``|z_j|^p / Σ_l |z_l|^p`` (signed: times sign(z_j)); an all-zero row gives 0 weights."""
        mag = z.abs()
        # Divide by the row max first so |z|^p neither underflows nor overflows; the weights are
        # invariant to that scale, so detaching it leaves the gradient exact.
        top = mag.amax(dim=-1, keepdim=True).detach()
        nonzero = mag > 0
        # where-guards keep pow's gradient finite at 0 for any p > 0 (not only p > 1).
        ratio = torch.where(nonzero, mag / torch.where(top > 0, top, 1.0), 1.0)
        powered = torch.where(nonzero, ratio.pow(self.power), 0.0)
        denom = powered.sum(dim=-1, keepdim=True)
        if self.signed:
            powered = powered * z.sign()
        return powered / torch.where(denom > 0, denom, 1.0)

    def extra_repr(self) -> str:
        return (
            f"head_dim={self.head_dim}, iterations={self.iterations}, lam={self.lam:g}, "
            f"rho={self.rho:g}, power={self.power:g}, signed={self.signed}, "
            f"random_tokens={self.random_tokens}, exclude_self={self.exclude_self}, "
            f"solver={self.solver!r}, normalize={self.normalize}"
        )
