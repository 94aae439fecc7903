"""PolySketch's learned even polynomial as its (L, S) scores, by tiles.

``sim = a_0 + a_2⟨q', k'⟩² (+ a_4⟨s_q, s_k⟩²)``, then ``Σ_j sim_ij v_j / (c + Σ_j sim_ij)`` over
the visible keys: the score form of ``polysketch`` with ``learned_coefficients`` (degree 2: the
first two terms; degree 4: the sketches' term too). Two inner products of different widths make
it no polynomial of one score, so not ``power_exact``'s; it is that Function's scheme — a few
heads and, causal, a block of queries at a time (``power_exact.score_tiles``), scores recomputed in
backward, nothing (L, S) kept — with its own gradients, the coefficients' included. Autograd
over the formula kept several (B·H, L, S) tensors for backward.

Shapes (heads flattened): ``qn, kn: (B·H, L|S, D)``, ``sq, sk: (B·H, L|S, r)`` or None,
``v: (B·H, S, E)``, ``a``: (a_0, a_2[, a_4]) ≥ 0 (softplus), so sim ≥ a_0 needs no clamp;
``blocked`` as ``power_exact``'s.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.ops.power_exact import blocked_tile, score_tiles


def _scores(
    qn: Tensor, kn: Tensor, sq: Tensor | None, sk: Tensor | None, a: Tensor
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(sim, d1, d2)`` of one tile: the inner products d1 = ⟨q', k'⟩, d2 = ⟨s_q, s_k⟩."""
    d1 = torch.bmm(qn, kn.transpose(1, 2))
    sim = d1.square().mul_(a[1]).add_(a[0])
    d2 = None
    if sq is not None and sk is not None:
        d2 = torch.bmm(sq, sk.transpose(1, 2))
        sim.add_(d2.square().mul_(a[2]))
    return sim, d1, d2


def _sketch_tile(
    sq: Tensor | None, sk: Tensor | None, t: slice, rows: slice, cols: slice
) -> tuple[Tensor | None, Tensor | None]:
    if sq is None or sk is None:
        return None, None
    return sq[t, rows], sk[t, cols]


class _EvenPolynomial(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        qn: Tensor,
        kn: Tensor,
        sq: Tensor | None,
        sk: Tensor | None,
        v: Tensor,
        a: Tensor,
        blocked: Tensor | None,
        causal: bool,
        c: float,
    ):
        bh, length, _ = qn.shape
        out = v.new_empty(bh, length, v.shape[-1])
        den = v.new_empty(bh, length, 1)
        for t, rows, cols in score_tiles(bh, length, kn.shape[1], causal, qn.device):
            s_q, s_k = _sketch_tile(sq, sk, t, rows, cols)
            sim, _, _ = _scores(qn[t, rows], kn[t, cols], s_q, s_k, a)
            mask = blocked_tile(blocked, t, rows, cols)
            if mask is not None:
                sim.masked_fill_(mask, 0.0)
            d = sim.sum(dim=-1, keepdim=True).add_(c)
            d.masked_fill_(d == 0, 1.0)  # c = 0 and every key blocked: output 0, not NaN
            den[t, rows] = d
            out[t, rows] = torch.bmm(sim, v[t, cols]).div_(d)
        ctx.causal = causal
        ctx.save_for_backward(qn, kn, sq, sk, v, a, blocked, out, den)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        qn, kn, sq, sk, v, a, blocked, out, den = ctx.saved_tensors
        sketched = sq is not None and sk is not None
        dqn, dsq = torch.empty_like(qn), torch.empty_like(sq) if sketched else None
        # Causal tiles overlap in keys: their key-side gradients add up.
        dkn, dsk = torch.zeros_like(kn), torch.zeros_like(sk) if sketched else None
        dv, da = torch.zeros_like(v), torch.zeros_like(a)
        for t, rows, cols in score_tiles(
            qn.shape[0], qn.shape[1], kn.shape[1], ctx.causal, qn.device
        ):
            q1, k1 = qn[t, rows], kn[t, cols]
            s_q, s_k = _sketch_tile(sq, sk, t, rows, cols)
            sim, d1, d2 = _scores(q1, k1, s_q, s_k, a)
            mask = blocked_tile(blocked, t, rows, cols)
            if mask is not None:
                sim.masked_fill_(mask, 0.0)
            # out = num/den: d num = dO/den; d den = −Σ_e dO·out/den, the same for every key.
            g_num = grad[t, rows] / den[t, rows]
            g_den = (g_num * out[t, rows]).sum(dim=-1, keepdim=True).neg_()
            dv[t, cols] += torch.bmm(sim.transpose(1, 2), g_num)
            d_sim = torch.bmm(g_num, v[t, cols].transpose(1, 2)).add_(g_den)
            if mask is not None:
                d_sim.masked_fill_(mask, 0.0)
            da[0] += d_sim.sum()
            da[1] += (d_sim * d1.square()).sum()
            d_d1 = d_sim * d1 * (2 * a[1])  # d(a_2 d²)/dd = 2 a_2 d
            dqn[t, rows] = torch.bmm(d_d1, k1)
            dkn[t, cols] += torch.bmm(d_d1.transpose(1, 2), q1)
            if d2 is not None and s_q is not None and s_k is not None:
                assert dsq is not None and dsk is not None
                da[2] += (d_sim * d2.square()).sum()
                d_d2 = d_sim.mul_(d2).mul_(2 * a[2])
                dsq[t, rows] = torch.bmm(d_d2, s_k)
                dsk[t, cols] += torch.bmm(d_d2.transpose(1, 2), s_q)
        return dqn, dkn, dsq, dsk, dv, da, None, None, None


def even_polynomial_attention(
    qn: Tensor,
    kn: Tensor,
    v: Tensor,
    coefficients: Tensor,
    sketches: tuple[Tensor, Tensor] | None,
    *,
    blocked: Tensor | None,
    causal: bool,
    offset: float,
) -> Tensor:
    """``(B, H, L, D), (B, H, S, D), (B, H, S, E) -> (B, H, L, E)``; see the module docstring.

    ``coefficients``: (a_0, a_2[, a_4]), q's dtype, may require grad; ``sketches``: (s_q, s_k),
    ``(B, H, L|S, r)``, with a_4 only. ``blocked``, ``causal``: as ``exact_power_attention``'s.
    """
    b, h, length, d = qn.shape
    s, e = kn.shape[2], v.shape[-1]
    if blocked is not None and blocked.dim() == 4:
        blocked = blocked.expand(b, h, length, s).reshape(b * h, length, s)
    sq = sk = None
    if sketches is not None:
        r = sketches[0].shape[-1]
        sq, sk = sketches[0].reshape(b * h, length, r), sketches[1].reshape(b * h, s, r)
    out = _EvenPolynomial.apply(
        qn.reshape(b * h, length, d),
        kn.reshape(b * h, s, d),
        sq,
        sk,
        v.reshape(b * h, s, e),
        coefficients,
        blocked,
        bool(causal),
        float(offset),
    )
    return out.view(b, h, length, e)
