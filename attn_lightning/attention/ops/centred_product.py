"""The normalised causal product in bfloat16: bf16 GEMMs on values centred chunk by chunk.

``out_i = Σ_{j≤i} s_ij v_j / den_i`` with ``s_ij = q_iᵀk_j`` and ``den_i = shift + Σ_{j≤i} s_ij``,
the same product and layout as ``causal_product`` (read that first), for bf16 inputs.

Why centred: the query gradient is ``dq_i = Σ_{j≤i} k_j dO_i·(v_j − out_i) / den_i``. From chunk
states it is the difference ``(S dO_i − z (dO_i·out_i)) / den_i`` of two terms of size |z|·|v̄|
when the values have a mean v̄, while the difference is of the size of their spread. In bf16
(8 significant bits) each term is rounded at 2^-9 of its size, so the difference is lost as the
prefix grows. Centring removes the large terms: for chunk c with a reference m_c, exactly::

    out_i − m_c = (Σ_j s_ij (v_j − m_c) − m_c·(den_i − Σ_j s_ij)) / den_i

so every GEMM sees ``u_j = v_j − m_c``; the states are ``S̃_c = Σ_{j<c} k_j u_jᵀ = S − z m_cᵀ``,
formed in float32 from the float32 prefix and rounded to bf16 as the next GEMM's operand; and
backward's normaliser column carries ``dO_i·(out_i − m_c)`` from a float32 copy of ``out − m_c``,
as two bf16 columns (hi + lo) where it meets the values inside a chunk. The suffix sums R of
backward, shared by chunks with different references, are kept uncentred in float32 and moved to
each chunk's reference where they are read (``(v_j − m_c)·R + R_z + R·m_c``).

References, all causal (only positions every row that reads them sees, so no later value reaches
an earlier output, even by rounding): for chunk c's rows, m_c = the mean of the values before
chunk c (v's first value for chunk 0); for chunk c's own states, read only by later chunks, the
mean through the end of chunk c. Any reference is exact in value (float64 gradcheck); these sit
near out_i when attention is spread out, where the cancellation is worst: for values of mean 2σ
dq's relative error against float64 grows with N uncentred (0.10 at N = 256, 0.41 at 8,192) and
stays ~1.5e-2 centred (CPU, elu+1, F = E = 32, C = 64). A mean through the end of each chunk for
its rows too would let a large later value of the chunk move its earlier outputs by rounding.

The prefix states, the suffix sums and the normaliser are float32; every matmul is a bf16 GEMM
(tensor cores on a GPU). Cost over the plain product: one pass over v for the references, a
float32 ``out − m_c`` (N·E) saved, and a few elementwise passes over tile-sized temporaries.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.base import accumulation_dtype
from attn_lightning.attention.ops.chunk_tiles import flat, tiles

Saved = tuple[Tensor, Tensor, Tensor, Tensor, Tensor]  # out − m, scores, S̃, den, m


def references(v4: Tensor) -> tuple[Tensor, Tensor]:
    """The references of chunk c's rows and of its states (module docstring), from one pass over v.

    ``(B·H, n, C, E) -> 2 × (B·H, n, 1, E)`` in v's dtype: the rows' is v's first value for chunk 0
    and the mean of the values before chunk c after it; the states' is the mean through chunk c.
    """
    n, c = v4.shape[1:3]
    acc = accumulation_dtype(v4.dtype)
    through = v4.sum(dim=2, dtype=acc).cumsum_(dim=1)  # Σ v over chunks 0..c: (B·H, n, E)
    through /= torch.arange(1, n + 1, device=v4.device, dtype=acc)[:, None] * c
    rows = torch.cat([v4[:, :1, 0].to(acc), through[:, :-1]], dim=1)
    return rows.to(v4.dtype).unsqueeze(2), through.to(v4.dtype).unsqueeze(2)


def _operand(v: Tensor, m: Tensor, ones: int) -> Tensor:
    """``[v − m_c, 1, …]`` for one ``(g, t, C, E)`` tile, flattened: the values' GEMM operand."""
    e = v.shape[-1]
    u = v.new_empty(*v.shape[:-1], e + ones)
    torch.sub(v, m, out=u[..., :e])
    u[..., e:].fill_(1.0)
    return flat(u)


def centred_forward(
    q4: Tensor, k4: Tensor, v4: Tensor, shift: float, tile_tokens: int
) -> tuple[Tensor, Saved]:
    """The normalised product of ``(B·H, n, C, ·)`` bf16 chunks, and what backward needs."""
    bh, n, c, f = q4.shape
    e = v4.shape[-1]
    acc = accumulation_dtype(q4.dtype)
    # A chunk's own states are read only by later chunks, which see all of it: centred on the
    # mean through its end, the causal best for them.
    m, m_states = references(v4)
    out = v4.new_empty(v4.shape)
    out_c = v4.new_empty(v4.shape, dtype=acc)  # out − m_c, in acc: backward's d den reads it
    scores = q4.new_empty(bh, n, c, c)
    prev = q4.new_empty(bh, n, f, e + 1)  # [S̃_c, z_{c-1}], bf16: the GEMM operand
    den = q4.new_empty(bh, n, c, 1, dtype=acc)
    carry: Tensor | None = None  # inclusive uncentred [S, z] (acc) at the end of the last tile
    for heads, chunks in tiles(bh, n, c, tile_tokens):
        if chunks.start == 0:
            carry = None
        mt = m[heads, chunks]  # (g, t, 1, E)
        m32, mf = mt.to(acc), flat(mt)
        qt, kt = flat(q4[heads, chunks]), flat(k4[heads, chunks])
        ut = _operand(v4[heads, chunks], mt, 1)
        st = flat(scores[heads, chunks])
        torch.bmm(qt, kt.transpose(1, 2), out=st).tril_()
        # K_cᵀ[V_c − m', 1] (rounded at 2^-9 of the small part), then + z_c m'ᵀ in acc.
        ms = m_states[heads, chunks]
        us = _operand(v4[heads, chunks], ms, 1)
        states = torch.bmm(kt.transpose(1, 2), us).to(acc).view(*mt.shape[:2], f, e + 1)
        states[..., :e].addcmul_(states[..., e:], ms.to(acc))  # K_cᵀ[V_c, 1]
        states.cumsum_(dim=1)
        if carry is not None:
            states += carry
        before = torch.empty_like(states)  # exclusive [S, z]
        before[:, 1:] = states[:, :-1]
        if carry is None:
            before[:, 0].zero_()
        else:
            before[:, 0] = carry[:, 0]
        carry = states[:, -1:]
        pt = prev[heads, chunks]
        torch.addcmul(before[..., :e], before[..., e:], m32, value=-1.0, out=pt[..., :e])
        pt[..., e:] = before[..., e:]
        num = torch.bmm(st, ut).baddbmm_(qt, flat(pt))  # [Σ s (v − m_c), Σ s]
        z = num[..., e:].to(acc)
        dt = flat(den[heads, chunks])
        torch.add(z, shift, out=dt)
        # A query that sees no key (all masked, shift = 0) has num = den = 0: output 0, not NaN.
        dt.masked_fill_(dt == 0, 1.0)
        oct_ = flat(out_c[heads, chunks])
        torch.div(num[..., :e], dt, out=oct_)
        oct_.addcmul_((dt - z) / dt, mf, value=-1.0)  # − m_c·shift/den: out − m_c
        torch.add(oct_, mf, out=flat(out[heads, chunks]))
    return out, (out_c, scores, prev, den, m)


def centred_backward(
    grad4: Tensor, q4: Tensor, k4: Tensor, v4: Tensor, saved: Saved, tile_tokens: int
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``centred_forward`` (``causal_product``'s backward, centred)."""
    out_c, scores, prev, den, m = saved
    bh, n, c, _ = q4.shape
    e = v4.shape[-1]
    acc = accumulation_dtype(q4.dtype)
    dq, dk, dv = torch.empty_like(q4), torch.empty_like(k4), torch.empty_like(v4)
    carry: Tensor | None = None  # uncentred Σ of Q_c'ᵀ[dO_c', dO·out]/den over later tiles
    for heads, chunks in reversed(list(tiles(bh, n, c, tile_tokens))):
        if chunks.stop == n:
            carry = None
        mt = m[heads, chunks]
        m32 = flat(mt).to(acc).transpose(1, 2)  # (g·t, E, 1)
        qt, kt = flat(q4[heads, chunks]), flat(k4[heads, chunks])
        ut = _operand(v4[heads, chunks], mt, 2)  # [v − m_c, 1, 1]
        st, pt = flat(scores[heads, chunks]), flat(prev[heads, chunks])
        gt, dt = flat(grad4[heads, chunks]), flat(den[heads, chunks])
        # out = num/den: d num = dO/den, d den = −dO·(out − m_c)/den against the centred states,
        # in two bf16 columns (hi + lo): inside a chunk it cancels against dO·(v_j − m_c).
        go = gt.new_empty(*gt.shape[:-1], e + 2)
        torch.div(gt, dt, out=go[..., :e])
        d_den = (gt * flat(out_c[heads, chunks])).sum(-1, keepdim=True).div_(dt).neg_()
        go[..., e : e + 1] = d_den
        torch.sub(d_den, go[..., e : e + 1], out=go[..., e + 1 :])
        d_scores = torch.bmm(go, ut.transpose(1, 2)).tril_()
        # Against the states, lo·z is below bf16's reach (centred: d den is small there).
        go1, ut = go[..., : e + 1], ut[..., : e + 1]
        torch.bmm(d_scores, kt, out=flat(dq[heads, chunks])).baddbmm_(go1, pt.transpose(1, 2))
        # Q_cᵀ go_c in acc (hi + lo summed), its normaliser column moved from m_c to 0.
        g_hl = torch.bmm(qt.transpose(1, 2), go)  # (g·t, F, E + 2)
        g = g_hl[..., : e + 1].to(acc, memory_format=torch.contiguous_format)
        g[..., e:] += g_hl[..., e + 1 :]
        g[..., e:].baddbmm_(g[..., :e], m32, alpha=-1.0)
        g = g.view(*mt.shape[:2], *g.shape[1:])
        later = torch.empty_like(g)  # R_c = Σ_{c'>c}, exclusive
        if carry is None:
            later[:, -1].zero_()
        else:
            later[:, -1] = carry[:, 0]
        if g.shape[1] > 1:
            suffix = g[:, 1:].flip(1).cumsum_(dim=1).flip(1)
            if carry is not None:
                suffix += carry
            later[:, :-1] = suffix
        carry = later[:, :1] + g[:, :1]
        r32 = flat(later)
        lt = r32.to(q4.dtype)  # R for chunk c's reference: normaliser column + R·m_c
        lt[..., e:] = torch.baddbmm(r32[..., e:], r32[..., :e], m32)
        torch.bmm(d_scores.transpose(1, 2), qt, out=flat(dk[heads, chunks])).baddbmm_(
            ut, lt.transpose(1, 2)
        )
        dvt = flat(dv[heads, chunks])
        torch.bmm(st.transpose(1, 2), go[..., :e], out=dvt).baddbmm_(kt, lt[..., :e])
    return dq, dk, dv


class CentredProduct(torch.autograd.Function):
    """``normalised_causal_product`` for bf16 inputs (module docstring); call ``apply``."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, chunk: int, shift: float, tile: int):
        b, h, n, e = v.shape
        q4, k4, v4 = (x.contiguous().view(b * h, n // chunk, chunk, x.shape[-1]) for x in (q, k, v))
        out, saved = centred_forward(q4, k4, v4, shift, tile)
        ctx.tile = tile
        ctx.save_for_backward(q4, k4, v4, *saved)
        return out.view(b, h, n, e)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q4, k4, v4, *saved = ctx.saved_tensors
        shape = grad_out.shape
        grad4 = grad_out.contiguous().reshape(*q4.shape[:3], shape[-1])
        dq, dk, dv = centred_backward(grad4, q4, k4, v4, tuple(saved), ctx.tile)
        return dq.view(*shape[:3], -1), dk.view(*shape[:3], -1), dv.view(shape), None, None, None
