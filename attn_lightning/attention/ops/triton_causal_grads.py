"""The backward kernels of the Triton causal product (``triton_causal`` launches them).

Written as ``triton_causal_kernels``' forward kernels (layout, strides, ``DOT``, ``SPLIT``, why
the sums are ``tl.reduce``) and bound with them by its ``kernels``; the helpers they call are
that module's.
"""

from __future__ import annotations

import triton.language as tl

from attn_lightning.attention.ops.triton_causal_kernels import (
    _at,
    _phi,
    _qk_tile,
    _split_dot,
    _sum,
)


def _grad_qk(q, sqb, sqh, sqn, k, skb, skh, skn, v, svb, svh, svn, grad, sgb, sgh, sgn, H, mean,
             den, gden_c, s, z, t, tz, r, rz, tr, trz, dq, dk, dv, N, F, E, NC, NS, SEG, NB,
             C: tl.constexpr, BF: tl.constexpr, BE: tl.constexpr, ELU1: tl.constexpr,
             SPLIT: tl.constexpr, PREC: tl.constexpr, DOT: tl.constexpr,
             MERGE_V: tl.constexpr):  # fmt: skip
    """dQ, dK of one chunk and F-tile; grid (NC, BH, F tiles). MERGE_V (one F tile: F ≤ BF): dV
    too, E tile by E tile as ``_grad_v`` forms it, from the φ(Q), φ(K), dO and R tiles this
    program holds anyway, so no kernel reads them again.

    Uncentred, with ``G = dO/den`` and ``dA = tril(G Vᵀ + dDen)``: ``dQ = dA K + G S_prevᵀ +
    dDen z_prevᵀ`` and ``dK = dAᵀQ + V Rᵀ + r``, R and r the sums over later chunks of ``QᵀG``
    and ``QᵀdDen``. When the values have a mean, ``G·v_j`` and ``dDen`` (and ``G S_prevᵀ`` and
    ``dDen z_prevᵀ``) are large and nearly cancel, which bf16 operands (rounded at 2⁻⁹) lose. So,
    as ``centred_product``, chunk c uses values ``V' = V − m_c`` (m_c the mean of the values
    before chunk c, v_0 for chunk 0: causal), exactly: ``dA = tril(G V'ᵀ + dDen')``, ``dQ = dA K
    + G S'ᵀ + dDen' z_prevᵀ`` with ``S' = S_prev − z_prev m_cᵀ`` formed in float32, and ``dK =
    dAᵀQ + V' Rᵀ + (r + R m_c)``, R and r uncentred float32 sums; ``V' Rᵀ`` takes R as hi + lo
    (SPLIT), so dK keeps R's float32 accuracy (one bf16 R made dk 3.7× worse than the torch
    kernel for values of mean 5). Chunk c's states are ``s[c] + t[g]`` (t: the forward's
    prefix, kept by ``_readout``), its sums ``r[c]`` plus the totals ``tr`` of the segments after
    g = c // SEG (``_states``), summed here."""
    c, bh, ft = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    g = c // SEG
    rows = c * C + tl.arange(0, C)
    fo = ft * BF + tl.arange(0, BF)
    rm, fm = rows < N, fo < F
    d = tl.load(den + bh * N + rows, rm, 1.0)
    gp, vp = _at(grad, bh, H, sgb, sgh), _at(v, bh, H, svb, svh)
    gd = tl.load(gden_c + bh * N + rows, rm, 0.0)  # dDen', from ``_states`` (``_dden``)
    qm = rm[:, None] & fm[None, :]
    qx = tl.load(_at(q, bh, H, sqb, sqh) + rows[:, None] * sqn + fo[None, :], qm, 0.0)
    kx = tl.load(_at(k, bh, H, skb, skh) + rows[:, None] * skn + fo[None, :], qm, 0.0)
    qb, kb = _phi(qx, qm, ELU1), _phi(kx, qm, ELU1)
    sp, rp = s + (bh * NC + c) * F * E, r + (bh * NC + c) * F * E
    tp = t + (bh * NS + g) * F * E  # the forward's prefix at g (``_readout`` kept it)
    da = tl.full((C, C), 0.0, tl.float32)
    gq = tl.full((C, BF), 0.0, tl.float32)
    gk = tl.full((C, BF), 0.0, tl.float32)
    zb = tl.load(z + (bh * NC + c) * F + fo, fm, 0.0)
    zb += tl.load(tz + (bh * NS + g) * F + fo, fm, 0.0)
    rzb = tl.full((BF,), 0.0, tl.float32)  # r, then r + R m_c
    for i in range(0, NS - 1 - g):  # the totals of the segments after g, from the last
        rzb += tl.load(trz + (bh * NS + NS - 1 - i) * F + fo, fm, 0.0)
    rzb += tl.load(rz + (bh * NC + c) * F + fo, fm, 0.0)
    NE_T = (E + BE - 1) // BE  # BE is tuned (``CONFIGS``): the tile count follows it
    if MERGE_V:  # every feature in this tile: the scores are whole, as ``_grad_v``'s
        j = tl.arange(0, C)
        sc = tl.dot(qb.to(DOT), tl.trans(kb).to(DOT), input_precision=PREC)
        pt = tl.trans(tl.where(j[None, :] <= j[:, None], sc, 0.0).to(qb.dtype))
    for et in range(0, NE_T):
        eo = et * BE + tl.arange(0, BE)
        em = eo < E
        m = rm[:, None] & em[None, :]
        go = tl.load(gp + rows[:, None] * sgn + eo[None, :], m, 0.0).to(tl.float32)
        go = (go / d[:, None]).to(qb.dtype)
        mb = tl.load(mean + (bh * NC + c) * E + eo, em, 0.0)
        vb = tl.load(vp + rows[:, None] * svn + eo[None, :], m, 0.0)
        vb = tl.where(m, vb.to(tl.float32) - mb[None, :], 0.0).to(qb.dtype)
        da = tl.dot(go.to(DOT), tl.trans(vb).to(DOT), da, input_precision=PREC)
        tile = fo[:, None] * E + eo[None, :]
        sm = fm[:, None] & em[None, :]
        sb = tl.load(sp + tile, sm, 0.0) + tl.load(tp + tile, sm, 0.0)
        sb = (sb - zb[:, None] * mb[None, :]).to(qb.dtype)
        rf = tl.full((BF, BE), 0.0, tl.float32)
        for i in range(0, NS - 1 - g):  # R's suffix over the segments after g
            rf += tl.load(tr + (bh * NS + NS - 1 - i) * F * E + tile, sm, 0.0)
        rf += tl.load(rp + tile, sm, 0.0)
        rzb += tl.reduce(rf * mb[None, :], 1, _sum)
        gq = tl.dot(go.to(DOT), tl.trans(sb).to(DOT), gq, input_precision=PREC)
        gk = _split_dot(vb, tl.trans(rf), gk, SPLIT, PREC, DOT)
        if MERGE_V:  # dV = tril(QKᵀ)ᵀ G + K R for this E tile
            gv = tl.dot(kb.to(DOT), rf.to(qb.dtype).to(DOT), input_precision=PREC)
            gv = tl.dot(pt.to(DOT), go.to(DOT), gv, input_precision=PREC)
            tl.store(dv + bh * N * E + rows[:, None] * E + eo[None, :], gv.to(qb.dtype), m)
    i = tl.arange(0, C)
    da = tl.where(i[None, :] <= i[:, None], da + gd[:, None], 0.0).to(qb.dtype)
    gq = tl.dot(da.to(DOT), kb.to(DOT), gq, input_precision=PREC) + gd[:, None] * zb[None, :]
    gk = tl.dot(tl.trans(da).to(DOT), qb.to(DOT), gk, input_precision=PREC) + rzb[None, :]
    if ELU1:  # d(elu + 1)/dx = 1 (x > 0) or e^x (of x ≤ 0: no overflow), on float32 sums
        gq *= tl.where(qx > 0.0, 1.0, tl.exp(tl.minimum(qx.to(tl.float32), 0.0)))
        gk *= tl.where(kx > 0.0, 1.0, tl.exp(tl.minimum(kx.to(tl.float32), 0.0)))
    off = rows[:, None] * F + fo[None, :]
    tl.store(dq + bh * N * F + off, gq.to(qb.dtype), qm)
    tl.store(dk + bh * N * F + off, gk.to(qb.dtype), qm)


def _grad_v(q, sqb, sqh, sqn, k, skb, skh, skn, grad, sgb, sgh, sgn, H, den, r, tr, dv, N, F, E,
            NC, NS, SEG, NB, C: tl.constexpr, BF: tl.constexpr, BE: tl.constexpr,
            ELU1: tl.constexpr, PREC: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    """``dV = tril(QKᵀ)ᵀ G + K R`` of one chunk and E-tile (``G = dO/den``, R as in
    ``_grad_qk``: ``r[c]`` plus the totals ``tr`` of the segments after g); grid (NC, BH, E
    tiles). Launched only when φ spans more than one F tile (else ``_grad_qk`` forms dV)."""
    c, bh, et = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    g = c // SEG
    rows = c * C + tl.arange(0, C)
    eo = et * BE + tl.arange(0, BE)
    rm, em = rows < N, eo < E
    qp, kp = _at(q, bh, H, sqb, sqh), _at(k, bh, H, skb, skh)
    rp = r + (bh * NC + c) * F * E
    scores = tl.full((C, C), 0.0, tl.float32)
    gv = tl.full((C, BE), 0.0, tl.float32)
    NF_T = (F + BF - 1) // BF  # BF is tuned (``CONFIGS``): the tile count follows it
    for ft in range(0, NF_T):
        fo, fm, qb, kb, sc = _qk_tile(qp, kp, sqn, skn, rows, rm, ft, F, BF, ELU1, PREC, DOT)
        scores += sc
        tile, sm = fo[:, None] * E + eo[None, :], fm[:, None] & em[None, :]
        rb = tl.full((BF, BE), 0.0, tl.float32)
        for i in range(0, NS - 1 - g):  # R's suffix over the segments after g
            rb += tl.load(tr + (bh * NS + NS - 1 - i) * F * E + tile, sm, 0.0)
        rb += tl.load(rp + tile, sm, 0.0)
        gv = tl.dot(kb.to(DOT), rb.to(qb.dtype).to(DOT), gv, input_precision=PREC)
    m = rm[:, None] & em[None, :]
    d = tl.load(den + bh * N + rows, rm, 1.0)
    go = tl.load(_at(grad, bh, H, sgb, sgh) + rows[:, None] * sgn + eo[None, :], m, 0.0)
    go = go.to(tl.float32) / d[:, None]
    j = tl.arange(0, C)
    p = tl.where(j[None, :] <= tl.arange(0, C)[:, None], scores, 0.0).to(dv.dtype.element_ty)
    gv = tl.dot(tl.trans(p).to(DOT), go.to(dv.dtype.element_ty).to(DOT), gv,
                input_precision=PREC)  # fmt: skip
    tl.store(dv + bh * N * E + rows[:, None] * E + eo[None, :], gv.to(dv.dtype.element_ty), m)
