"""Float64 references of the mixers that are no kernel: the optimization attention (ADMM) and
PoolFormer's pooling."""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.naive.common import F64


def naive_optimization(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_padding_mask: Tensor | None = None,
    dictionary: str = "values",
    iterations: int = 10,
    lam: float = 0.1,
    rho: float = 1.0,
    power: float = 5.0,
    signed: bool = False,
    exclude_self: bool = False,
    normalize: bool = False,
) -> Tensor:
    """Per batch, head and query: K steps of scaled ADMM on ``½‖q − Dm c‖² + λ‖c‖₁`` with
    ``M = inv(DmᵀDm + ρI)`` formed explicitly (S×S), then ``w_j = |z_j|^p / Σ_l |z_l|^p``
    (times sign(z_j) if signed) and ``out = Σ_j w_j v_j``. ``Dm`` holds the values (``dictionary=
    "values"``, needs Dv = D) or the keys as columns; padded tokens are zero columns with z_j
    pinned to 0; ``exclude_self`` pins z_ii too. No random tokens: the eval-mode output."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    tokens = {"values": v, "keys": k}[dictionary]  # (B, H, S, D)
    s = k.shape[2]
    outs = []
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            qq, kk = q[b, h], tokens[b, h]
            if normalize:
                qq = qq / qq.norm(dim=-1, keepdim=True)
                kk = kk / kk.norm(dim=-1, keepdim=True)
            real = (
                torch.ones(s, dtype=torch.bool) if key_padding_mask is None else key_padding_mask[b]
            )
            dm = torch.where(real[:, None], kk, 0.0).T  # (D, S): the tokens as columns
            m = torch.linalg.inv(dm.T @ dm + rho * torch.eye(s, dtype=dm.dtype))
            for i in range(q.shape[2]):
                keep = real.clone()
                if exclude_self:
                    keep[i] = False
                z = u = torch.zeros(s, dtype=dm.dtype)
                for _ in range(iterations):
                    c = m @ (dm.T @ qq[i] + rho * (z - u))
                    x = c + u
                    z = torch.where(keep, x.sign() * (x.abs() - lam / rho).clamp_min(0), 0.0)
                    u = u + c - z
                a = z.abs() ** power
                w = a * z.sign() if signed else a
                w = w / a.sum() if a.sum() > 0 else torch.zeros_like(a)
                outs.append(w @ v[b, h])
    return torch.stack(outs).reshape(q.shape[0], q.shape[1], q.shape[2], v.shape[-1])


def naive_pool(
    v: Tensor,
    *,
    grid: tuple[int, int] | None = None,
    pool_size: int = 3,
    subtract_input: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """PoolFormer's mixer as a loop over each token's window: ``out_i`` = the mean of the real
    ``v_j`` with j in the k×k window around i on the ``grid`` (k tokens of the sequence when None),
    minus ``v_i`` if ``subtract_input``; 0 for a window with no real token. q and k play no part."""
    b, h, s, dv = v.shape
    rows, cols = grid if grid is not None else (1, s)
    half = pool_size // 2
    real = torch.ones(b, s, dtype=torch.bool) if key_padding_mask is None else key_padding_mask
    v = torch.where(real[:, None, :, None], v.to(F64), 0.0)
    out = torch.zeros(b, h, s, dv, dtype=F64)
    for i in range(s):
        r, c = divmod(i, cols)
        window = [
            rr * cols + cc
            for rr in range(r - half, r + half + 1)
            for cc in range(c - half, c + half + 1)
            if 0 <= rr < rows and 0 <= cc < cols
        ]
        for bb in range(b):
            seen = [j for j in window if real[bb, j]]
            if seen:
                out[bb, :, i] = v[bb, :, seen].mean(dim=1)
    return out - v if subtract_input else out
