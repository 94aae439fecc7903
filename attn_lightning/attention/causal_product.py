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
import torch.nn.functional as F
from torch import Tensor


def _chunks(x: Tensor, c: int) -> Tensor:
    """``(B, H, N, F) -> (B·H·n, C, F)``: one flat batch of chunks (a view when contiguous)."""
    return x.reshape(-1, c, x.shape[-1])


def _shift_right(states: Tensor, nc: int) -> Tensor:
    """Per sequence, chunk c gets ``states[c-1]`` and chunk 0 gets zeros (exclusive prefix)."""
    s = states.reshape(-1, nc, *states.shape[1:])  # (B·H, n, F, E)
    return F.pad(s[:, :-1], (0, 0, 0, 0, 1, 0)).reshape(states.shape)


def _product_forward(qc: Tensor, kc: Tensor, vc: Tensor, nc: int) -> tuple[Tensor, ...]:
    """Chunked ``O = tril(QKᵀ)V`` on ``(B·H·n, C, ·)`` chunks; also returns what backward needs."""
    scores = torch.bmm(qc, kc.transpose(1, 2)).tril_()  # (B·H·n, C, C)
    chunk_states = torch.bmm(kc.transpose(1, 2), vc)  # (B·H·n, F, E)
    chunk_states.view(-1, nc, *chunk_states.shape[1:]).cumsum_(dim=1)  # inclusive, in place
    prev = _shift_right(chunk_states, nc)  # exclusive prefix state S_{c-1}: (B·H·n, F, E)
    out = torch.bmm(scores, vc).baddbmm_(qc, prev)  # (B·H·n, C, E), no temporaries
    return out, scores, prev


def _product_backward(
    go: Tensor, qc: Tensor, kc: Tensor, vc: Tensor, scores: Tensor, prev: Tensor, nc: int
) -> tuple[Tensor, Tensor, Tensor]:
    d_scores = torch.bmm(go, vc.transpose(1, 2)).tril_()
    dq = torch.bmm(d_scores, kc).baddbmm_(go, prev.transpose(1, 2))
    # R_c = Σ_{c'>c} Q_c'ᵀ dO_c': reverse exclusive prefix sum of the per-chunk products.
    g = torch.bmm(qc.transpose(1, 2), go).view(-1, nc, *prev.shape[1:]).flip(1)
    later = _shift_right(g.cumsum_(dim=1).view(prev.shape), nc)  # flipped: Σ over c' > c
    later = later.view(-1, nc, *prev.shape[1:]).flip(1).reshape(prev.shape)
    dk = torch.bmm(d_scores.transpose(1, 2), qc).baddbmm_(vc, later.transpose(1, 2))
    dv = torch.bmm(scores.transpose(1, 2), go).baddbmm_(kc, later)
    return dq, dk, dv


class _CausalProduct(torch.autograd.Function):
    """Raw product, or (``shift`` given) normalised: ``num / (Σ_{j≤i} q_iᵀk_j + shift)``.

    The normaliser rides along as a ones column appended to v, and the division and its
    gradient happen inside the Function, so no slice/concat/divide graph nodes (each a full pass
    over memory with zero-filled gradient buffers) are added around it.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, chunk: int, shift: float | None):  # type: ignore[override]
        b, h, n, e = v.shape
        nc = n // chunk
        if shift is not None:
            v = torch.cat([v, v.new_ones(b, h, n, 1)], dim=-1)
        qc, kc, vc = (_chunks(t.contiguous(), chunk) for t in (q, k, v))  # (B·H·n, C, ·)
        out, scores, prev = _product_forward(qc, kc, vc, nc)
        ctx.nc, ctx.normalised = nc, shift is not None
        if shift is None:
            ctx.save_for_backward(qc, kc, vc, scores, prev)
            return out.view(b, h, n, e)
        den = out[..., -1:] + shift  # (B·H·n, C, 1)
        # A query that sees no key (all masked, shift = 0) has num = den = 0: output 0, not NaN.
        den.masked_fill_(den == 0, 1.0)
        out = out[..., :-1] / den
        ctx.save_for_backward(qc, kc, vc, scores, prev, out, den)
        return out.view(b, h, n, e)

    @staticmethod
    def backward(ctx, grad_out: Tensor):  # type: ignore[override]
        qc, kc, vc, scores, prev, *normaliser = ctx.saved_tensors
        shape = grad_out.shape
        go = _chunks(grad_out.contiguous(), qc.shape[1])
        if ctx.normalised:
            out, den = normaliser
            # out = num/den: d num = dO/den, d den = −Σ_e dO·out / den (the ones column's grad).
            go = torch.cat([go, (go * out).sum(-1, keepdim=True).neg_()], dim=-1).div_(den)
        dq, dk, dv = _product_backward(go, qc, kc, vc, scores, prev, ctx.nc)
        if ctx.normalised:
            dv = dv[..., :-1]
        return dq.view(*shape[:3], -1), dk.view(*shape[:3], -1), dv.reshape(shape), None, None


def causal_product(q: Tensor, k: Tensor, v: Tensor, chunk: int) -> Tensor:
    """``out_i = Σ_{j≤i} (q_iᵀk_j) v_j`` for ``(B, H, N, ·)`` inputs with ``N % chunk == 0``."""
    _check_chunk(q, chunk)
    return _CausalProduct.apply(q, k, v, chunk, None)


def normalised_causal_product(q: Tensor, k: Tensor, v: Tensor, chunk: int, shift: float) -> Tensor:
    """``Σ_{j≤i} (q_iᵀk_j) v_j / (shift + Σ_{j≤i} q_iᵀk_j)``; ``N % chunk == 0``."""
    _check_chunk(q, chunk)
    return _CausalProduct.apply(q, k, v, chunk, float(shift))


def _check_chunk(q: Tensor, chunk: int) -> None:
    if q.shape[2] % chunk:
        raise ValueError(f"sequence length {q.shape[2]} is not a multiple of chunk {chunk}")
