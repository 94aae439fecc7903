"""What every float64 reference shares: the dtype, which keys a query sees, the normalised mix."""

from __future__ import annotations

import torch
from torch import Tensor

F64 = torch.float64


def visible_keys(q: Tensor, k: Tensor, *, causal: bool, key_padding_mask: Tensor | None) -> Tensor:
    """``(B, 1, L, S)`` bool: key j is visible to query i (not in the future, not padding)."""
    b, l_q, s = q.shape[0], q.shape[2], k.shape[2]
    allowed = torch.ones(b, 1, l_q, s, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed & torch.ones(l_q, s, dtype=torch.bool, device=q.device).tril()
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]
    return allowed


def normalised_mix(sim: Tensor, v: Tensor, allowed: Tensor, *, offset: float, eps: float) -> Tensor:
    """``Σ_j sim_ij v_j / (offset + Σ_j sim_ij + eps)`` over the allowed keys (``allowed``: (B, 1,
    L, S) bool), with every score kept in the sum; 0 for a query whose normaliser is exactly 0."""
    sim = torch.where(allowed, sim, 0.0)
    den = offset + sim.sum(dim=-1, keepdim=True) + eps
    return sim @ v.to(F64) / den.masked_fill(den == 0, 1.0)
