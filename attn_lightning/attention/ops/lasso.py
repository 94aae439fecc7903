"""Lasso codes by unrolled scaled ADMM, and the power weights of a code (optimization attention).

For every query row q_i at once, K steps of scaled ADMM on ``½‖q − Dm c‖² + λ‖c‖₁``::

    C ← M (DmᵀQ + ρ(Z − U)),   Z ← soft(C + U, λ/ρ),   U ← U + C − Z,   M = (DmᵀDm + ρI)⁻¹.

M is never formed as S×S: by Woodbury ``M X = (1/ρ)[X − Dmᵀ (ρI + DmDmᵀ)⁻¹ Dm X]`` needs one D×D
factorisation per batch×head (``ridge_factor``: Cholesky, or a thin SVD of Dm). Cost
O(S·D² + K·L·S·D) time, O(K·L·S) memory for autograd (every iterate is kept). The backend
(``optimization.py``) chooses the dictionary, masks it and adds its random tokens.

Shapes: ``q: (B, H, L, D)``, ``atoms: (B, H, S', D)`` (the dictionary's columns as rows),
codes and weights ``(B, H, L, S')``; ``keep: (B|1, 1, L, S')`` bool, True where a coefficient may
be nonzero, or None for all.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

SOLVERS = ("woodbury", "svd")


def ridge_factor(atoms: Tensor, *, rho: float, solver: str) -> Tensor:
    """``(ρI + DmDmᵀ)⁻¹ Dm`` as (B, H, D, S'): the D×D half of Woodbury."""
    d = atoms.shape[-1]
    eye = torch.eye(d, dtype=atoms.dtype, device=atoms.device)
    gram = rho * eye + atoms.transpose(-1, -2) @ atoms  # (B, H, D, D)
    if solver == "woodbury":
        return torch.cholesky_solve(atoms.transpose(-1, -2), torch.linalg.cholesky(gram))
    # SVD Dm = V diag(s) Uᵀ gives (ρI + DmDmᵀ)⁻¹ = (1/ρ)[I − V diag(s²/(s²+ρ)) Vᵀ]. Its
    # gradient is taken analytically (d G⁻¹ = −G⁻¹ dG G⁻¹) through a term that is exactly 0
    # in value: the SVD's own backward is undefined at repeated singular values, which
    # padding (zero columns) and fully masked rows produce.
    with torch.no_grad():
        _, sv, vh = torch.linalg.svd(atoms, full_matrices=False)  # vh: (B, H, r, D)
        shrink = sv.square() / (sv.square() + rho)
        inv0 = (eye - vh.transpose(-1, -2) @ (shrink[..., None] * vh)) / rho
    inv = inv0 + inv0 @ (gram.detach() - gram) @ inv0
    return inv @ atoms.transpose(-1, -2)


def nonzero_coefficients(
    q: Tensor,
    atoms: Tensor,
    *,
    tokens: int,
    key_padding_mask: Tensor | None,
    exclude_self: bool,
) -> Tensor | None:
    """``keep`` for ``admm_codes``: which coefficients may be nonzero (None: all).

    The first ``tokens`` (S) of the S' atoms are the sequence's: a padded token's coefficient is
    pinned to 0 (``key_padding_mask: (B, S)`` False), and with ``exclude_self`` so is query i's
    own token i (self-attention, L == S). The rest (random atoms) are free.
    """
    if key_padding_mask is None and not exclude_self:
        return None
    b, l_q, s = q.shape[0], q.shape[2], tokens
    keep = torch.ones(1, 1, l_q, atoms.shape[2], dtype=torch.bool, device=q.device)
    if key_padding_mask is not None:
        keep = keep.repeat(b, 1, 1, 1)
        keep[..., :s] &= key_padding_mask[:, None, None, :]
    if exclude_self:
        keep[..., :s] &= ~torch.eye(l_q, s, dtype=torch.bool, device=q.device)
    return keep


def admm_codes(
    q: Tensor,
    atoms: Tensor,
    *,
    keep: Tensor | None,
    lam: float,
    rho: float,
    iterations: int,
    solver: str,
) -> Tensor:
    """The sparse iterate Z after ``iterations`` ADMM steps, ``(B, H, L, S')``; exactly 0 where
    ``keep`` is False (the prox step projects those coefficients onto 0).

    Raises:
        torch.linalg.LinAlgError: the Cholesky factorisation failed (e.g. NaN in the atoms).
    """
    pt = ridge_factor(atoms, rho=rho, solver=solver)  # (B, H, D, S') = (ρI + DmDmᵀ)⁻¹ Dm
    zero = torch.zeros((), dtype=q.dtype, device=q.device)
    # Scaled ADMM, rows of M = (I − Dmᵀ(ρI + DmDmᵀ)⁻¹Dm)/ρ applied to x = DmᵀQ + ρ(z − u):
    #   c = M x,  z' = prox(c + u),  u' = u + c − z'.
    # M is linear, so with w = z − u and the constant c0 = M·DmᵀQ, y = c + u is
    #   y = c0 + z − ((w Dmᵀ) pt)   (rows; pt = (ρI + DmDmᵀ)⁻¹Dm)
    # and u' = y − z': the same iterates with 2 matmuls and 4 element-wise passes per step
    # instead of 2 and 9 (the element-wise passes and their backward dominated on a CPU).
    dtq = q @ atoms.transpose(-1, -2)  # (B, H, L, S') = (DmᵀQ)ᵀ
    c0 = (dtq - (dtq @ atoms) @ pt) / rho
    threshold = lam / rho
    z = F.softshrink(c0, threshold)  # the first step from z = u = 0: y = c0
    if keep is not None:
        z = torch.where(keep, z, zero)
    u = c0 - z
    for _ in range(iterations - 1):
        y = (c0 + z) - ((z - u) @ atoms) @ pt
        z = F.softshrink(y, threshold)
        if keep is not None:
            z = torch.where(keep, z, zero)
        u = y - z
    return z


def power_weights(z: Tensor, *, power: float, signed: bool) -> Tensor:
    """``|z_j|^p / Σ_l |z_l|^p`` (signed: times sign(z_j)); an all-zero row gives 0 weights."""
    mag = z.abs()
    # Divide by the row max first so |z|^p neither underflows nor overflows; the weights are
    # invariant to that scale, so detaching it leaves the gradient exact.
    top = mag.amax(dim=-1, keepdim=True).detach()
    nonzero = mag > 0
    # where-guards keep pow's gradient finite at 0 for any p > 0 (not only p > 1).
    ratio = torch.where(nonzero, mag / torch.where(top > 0, top, 1.0), 1.0)
    powered = torch.where(nonzero, ratio.pow(power), 0.0)
    denom = powered.sum(dim=-1, keepdim=True)
    if signed:
        powered = powered * z.sign()
    return powered / torch.where(denom > 0, denom, 1.0)
