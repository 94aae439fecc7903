"""Chunked causal product ``out_i = Σ_{j≤i} (q_iᵀk_j) v_j`` with a hand-written backward.

The core of every causal feature-map attention (see ``linear_kernels``). Written as one
``autograd.Function`` because plain autograd over the chunked form keeps every intermediate and
adds a pass over memory per op; here forward saves only the masked chunk scores and the inclusive
chunk states, and backward is eight batched matmuls plus one reverse prefix sum.

Layout: inputs ``(B, H, N, F)``, ``(B, H, N, F)``, ``(B, H, N, E)`` with N a multiple of the
chunk size C, viewed as ``(B·H, n, C, ·)`` chunks. With ``A_c = tril(Q_c K_cᵀ)`` and inclusive
chunk states ``S_c = Σ_{c'≤c} K_c'ᵀ V_c'``::

    forward   O_c  = A_c V_c + Q_c S_{c-1}
    backward  dA_c = tril(dO_c V_cᵀ),  R_c = Σ_{c'>c} Q_c'ᵀ dO_c'
              dQ_c = dA_c K_c + dO_c S_{c-1}ᵀ
              dK_c = dA_cᵀ Q_c + V_c R_cᵀ
              dV_c = A_cᵀ dO_c + K_c R_c

Exact: no term from a later position is ever added (and later subtracted), so the future cannot
leak even numerically. Cost ≈ 2·N·(C·(F+E) + 2·F·E) flops forward, twice that backward.
"""

from __future__ import annotations

import torch
from torch import Tensor


def _chunks(x: Tensor, c: int) -> Tensor:
    b, h, n, f = x.shape
    return x.reshape(b * h, n // c, c, f)


class _CausalProduct(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, chunk: int) -> Tensor:  # type: ignore[override]
        b, h, n, _ = q.shape
        qc, kc, vc = (_chunks(t.contiguous(), chunk) for t in (q, k, v))
        scores = torch.matmul(qc, kc.transpose(-1, -2)).tril_()  # (BH, n, C, C)
        out = torch.matmul(scores, vc)  # (BH, n, C, E)
        states = torch.matmul(kc.transpose(-1, -2), vc).cumsum_(dim=1)  # (BH, n, F, E) inclusive
        if qc.shape[1] > 1:
            out[:, 1:] += torch.matmul(qc[:, 1:], states[:, :-1])
        ctx.save_for_backward(qc, kc, vc, scores, states)
        return out.reshape(b, h, n, -1)

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        qc, kc, vc, scores, states = ctx.saved_tensors
        bh, nc, c, _ = qc.shape
        shape = (grad_out.shape[0], grad_out.shape[1], nc * c)
        go = _chunks(grad_out.contiguous(), c)
        d_scores = torch.matmul(go, vc.transpose(-1, -2)).tril_()
        dq = torch.matmul(d_scores, kc)
        dk = torch.matmul(d_scores.transpose(-1, -2), qc)
        dv = torch.matmul(scores.transpose(-1, -2), go)
        if nc > 1:
            dq[:, 1:] += torch.matmul(go[:, 1:], states[:, :-1].transpose(-1, -2))
            # R_c = Σ_{c'>c} Q_c'ᵀ dO_c': reverse inclusive prefix sum, used shifted by one.
            rev = torch.matmul(qc[:, 1:].transpose(-1, -2), go[:, 1:]).flip(1).cumsum_(1).flip(1)
            dk[:, :-1] += torch.matmul(vc[:, :-1], rev.transpose(-1, -2))
            dv[:, :-1] += torch.matmul(kc[:, :-1], rev)
        return dq.reshape(*shape, -1), dk.reshape(*shape, -1), dv.reshape(*shape, -1), None


def causal_product(q: Tensor, k: Tensor, v: Tensor, chunk: int) -> Tensor:
    """``out_i = Σ_{j≤i} (q_iᵀk_j) v_j`` for ``(B, H, N, ·)`` inputs with ``N % chunk == 0``."""
    if q.shape[2] % chunk:
        raise ValueError(f"sequence length {q.shape[2]} is not a multiple of chunk {chunk}")
    return _CausalProduct.apply(q, k, v, chunk)
