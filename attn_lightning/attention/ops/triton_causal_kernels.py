"""Triton kernels of the chunk-parallel causal product (``triton_causal`` launches them).

Plain functions, decorated twice by ``kernels``: compiled (``triton.jit``) for CUDA tensors, and
through Triton's interpreter for CPU tensors, so the CPU suite runs the very same kernel code
without changing what a CUDA call in the same process gets (``triton.jit`` picks one or the other
once, at decoration, from ``TRITON_INTERPRET``).

Layout: ``(BH, N, F)`` features, ``(BH, N, E)`` values, contiguous; chunk c covers rows
``[c·C, c·C + C)``, the last one partial (rows ≥ N load as 0 and are never stored). Per-chunk
states ``(BH, NC, F, E)`` and key sums ``(BH, NC, F)`` are float32. Every program tiles F and E by
``BF``/``BE`` (powers of two ≥ 16, ``tl.dot``'s minimum) so a wide φ (PolySketch's F = 528) loops
over tiles instead of holding an (F, E) block in registers. Offsets are int64 (BH·N·F can pass
2³¹). ``PREC`` is ``tl.dot``'s ``input_precision``: ``"ieee"`` for float32 inputs (true float32
products, no TF32), ignored for bf16 (bf16 operands, float32 accumulation).

Sums are ``tl.reduce(x, axis, tl.standard._sum_combine)``, not ``tl.sum``: ``tl.sum`` (as
``tl.zeros``, hence ``tl.full``) is a ``@triton.jit`` function, compiled or interpreted once
at ``import triton``, and a compiled one cannot run inside an interpreted kernel; ``tl.reduce``
is a builtin the interpreter replaces per launch (and recognises ``_sum_combine`` as ``np.sum``).
For the same reason the device functions the kernels call (``_phi``, ``_qk_tile``) are wrapped per
mode with them (``kernels``). ``ELU1`` kernels read raw q, k and apply φ = elu + 1 on load.
"""

from __future__ import annotations

import functools
import types
from types import SimpleNamespace

import triton
import triton.language as tl


def _phi(x, mask, ELU1: tl.constexpr):
    """A loaded feature tile ``x`` as features: itself, or (ELU1) ``elu(x) + 1`` evaluated in
    float32 and rounded to x's dtype once (the unfused path's bf16 φ), 0 outside ``mask`` (a
    masked load's 0 would become φ(0) = 1, and a -inf key, a padded one, becomes 0)."""
    if ELU1:
        xf = x.to(tl.float32)
        xf = tl.where(xf > 0.0, xf + 1.0, tl.exp(tl.minimum(xf, 0.0)))  # no overflow untaken
        x = tl.where(mask, xf, 0.0).to(x.dtype)
    return x


def _qk_tile(q, k, base, rows, rm, ft, F, BF: tl.constexpr, ELU1: tl.constexpr,
             PREC: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    """F-tile ``ft`` of one chunk: its columns and their mask, the φ(Q), φ(K) tiles and their
    float32 scores ``φ(Q)φ(K)ᵀ`` (C × C), the loop step readout and grad_v share."""
    fo = ft * BF + tl.arange(0, BF)
    fm = fo < F
    m = rm[:, None] & fm[None, :]
    off = base + rows[:, None] * F + fo[None, :]
    qb = _phi(tl.load(q + off, m, 0.0), m, ELU1)
    kb = _phi(tl.load(k + off, m, 0.0), m, ELU1)
    return fo, fm, qb, kb, tl.dot(qb.to(DOT), tl.trans(kb).to(DOT), input_precision=PREC)


def _states(a, b, den, gden, s, z, N, F, E, NC, NE_T, C: tl.constexpr, BF: tl.constexpr,
            BE: tl.constexpr, SCALED: tl.constexpr, ELU1: tl.constexpr, PREC: tl.constexpr,
            DOT: tl.constexpr):  # fmt: skip
    """One chunk's ``A_cᵀB_c`` (F-tile × E-tile) and ``Σ_rows A_c`` (SCALED: ``A_cᵀ(B_c/den)``
    and ``A_cᵀ gden``, backward's ``Q_cᵀ dNum_c`` and ``Q_cᵀ dDen_c``); grid (NC, BH, F·E tiles)."""
    c, bh, t = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    ft, et = t // NE_T, t % NE_T
    rows = c * C + tl.arange(0, C)
    fo, eo = ft * BF + tl.arange(0, BF), et * BE + tl.arange(0, BE)
    rm, fm, em = rows < N, fo < F, eo < E
    am = rm[:, None] & fm[None, :]
    ab = _phi(tl.load(a + bh * N * F + rows[:, None] * F + fo[None, :], am, 0.0), am, ELU1)
    bb = tl.load(b + bh * N * E + rows[:, None] * E + eo[None, :], rm[:, None] & em[None, :], 0.0)
    if SCALED:
        d = tl.load(den + bh * N + rows, rm, 1.0)
        bb = (bb.to(tl.float32) / d[:, None]).to(ab.dtype)
    acc = tl.dot(tl.trans(ab).to(DOT), bb.to(DOT), input_precision=PREC)  # (BF, BE) float32
    so = ((bh * NC + c) * F + fo[:, None]) * E + eo[None, :]
    tl.store(s + so, acc, fm[:, None] & em[None, :])
    if et == 0:
        if SCALED:
            w = tl.load(gden + bh * N + rows, rm, 0.0)
            zs = tl.reduce(ab.to(tl.float32) * w[:, None], 0, tl.standard._sum_combine)
        else:
            zs = tl.reduce(ab.to(tl.float32), 0, tl.standard._sum_combine)
        tl.store(z + (bh * NC + c) * F + fo, zs, fm)


def _prefix(s, z, s_end, z_end, F, E, NC, NE_T, BF: tl.constexpr, BE: tl.constexpr,
            REVERSE: tl.constexpr):  # fmt: skip
    """In place: each chunk's state becomes the float32 sum over the chunks before it (REVERSE:
    after it); the total goes to ``s_end``/``z_end`` (forward's final state). Grid (BH, tiles)."""
    bh, t = tl.program_id(0).to(tl.int64), tl.program_id(1)
    ft, et = t // NE_T, t % NE_T
    fo, eo = ft * BF + tl.arange(0, BF), et * BE + tl.arange(0, BE)
    fm, em = fo < F, eo < E
    m2 = fm[:, None] & em[None, :]
    run = tl.full((BF, BE), 0.0, tl.float32)
    zrun = tl.full((BF,), 0.0, tl.float32)
    for i in range(0, NC):
        c = NC - 1 - i if REVERSE else i
        so = ((bh * NC + c) * F + fo[:, None]) * E + eo[None, :]
        x = tl.load(s + so, m2, 0.0)
        tl.store(s + so, run, m2)
        run += x
        if et == 0:
            zx = tl.load(z + (bh * NC + c) * F + fo, fm, 0.0)
            tl.store(z + (bh * NC + c) * F + fo, zrun, fm)
            zrun += zx
    if not REVERSE:
        tl.store(s_end + (bh * F + fo[:, None]) * E + eo[None, :], run, m2)
        if et == 0:
            tl.store(z_end + bh * F + fo, zrun, fm)


def _readout(q, k, v, mean, s, z, out, out32, den, shift, N, F, E, NC, NF_T, KEEP: tl.constexpr,
             C: tl.constexpr, BF: tl.constexpr, BE: tl.constexpr, ELU1: tl.constexpr,
             PREC: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    """``out = (tril(QKᵀ)V + Q S_prev) / den``, ``den = shift + rowsum tril(QKᵀ) + Q z_prev``, for
    one chunk and E-tile; grid (NC, BH, E tiles). Saved: the float32 normaliser (1 where it is
    exactly 0) and (KEEP, half inputs) a float32 copy of out, whose bf16 rounding (2⁻⁹·|out|)
    would swamp backward's ``dO·(m_c − out)``.

    Centred on m_c (``_grad_qk``), exactly: ``out = m_c + (tril(QKᵀ)V' + Q S' − m_c·shift) / den``
    with ``V' = V − m_c`` and ``S' = S_prev − z_prev m_cᵀ`` in float32: in bf16, ``Q S_prev`` has
    the size of z·|m_c| and its rounding would move out off the weighted average of the values
    that backward's cancellations assume. A query that sees no key (den 0) gives 0."""
    c, bh, et = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    rows = c * C + tl.arange(0, C)
    eo = et * BE + tl.arange(0, BE)
    rm, em = rows < N, eo < E
    mb = tl.load(mean + (bh * NC + c) * E + eo, em, 0.0)
    scores = tl.full((C, C), 0.0, tl.float32)
    inter = tl.full((C, BE), 0.0, tl.float32)
    qz = tl.full((C,), 0.0, tl.float32)
    for ft in range(0, NF_T):
        fo, fm, qb, _kb, sc = _qk_tile(q, k, bh * N * F, rows, rm, ft, F, BF, ELU1, PREC, DOT)
        scores += sc
        zb = tl.load(z + (bh * NC + c) * F + fo, fm, 0.0)
        so = ((bh * NC + c) * F + fo[:, None]) * E + eo[None, :]
        sb = tl.load(s + so, fm[:, None] & em[None, :], 0.0) - zb[:, None] * mb[None, :]
        inter += tl.dot(qb.to(DOT), sb.to(qb.dtype).to(DOT), input_precision=PREC)
        qz += tl.reduce(qb.to(tl.float32) * zb[None, :], 1, tl.standard._sum_combine)
    j = tl.arange(0, C)
    vm = rm[:, None] & em[None, :]
    vb = tl.load(v + bh * N * E + rows[:, None] * E + eo[None, :], vm, 0.0)
    vb = tl.where(vm, vb.to(tl.float32) - mb[None, :], 0.0).to(vb.dtype)
    # Numerator and normaliser weigh the same (rounded) scores: an output stays an average.
    p = tl.where(j[None, :] <= tl.arange(0, C)[:, None], scores, 0.0).to(vb.dtype)
    d = tl.reduce(p.to(tl.float32), 1, tl.standard._sum_combine) + qz + shift
    seen = d != 0.0
    d = tl.where(seen, d, 1.0)
    num = tl.dot(p.to(DOT), vb.to(DOT), input_precision=PREC) + inter - mb[None, :] * shift
    o = tl.where(seen[:, None], mb[None, :] + num / d[:, None], 0.0)
    oo = bh * N * E + rows[:, None] * E + eo[None, :]
    tl.store(out + oo, o.to(vb.dtype), vm)
    if KEEP:
        tl.store(out32 + oo, o, vm)
    if et == 0:
        tl.store(den + bh * N + rows, d, rm)


def _delta(grad, out, den, mean, gden, gden_c, N, E, NC, NE_T, C: tl.constexpr,
           BE: tl.constexpr):  # fmt: skip
    """``dDen = −Σ_e dO·out / den`` and its centred ``dDen' = Σ_e dO·(m_c − out) / den`` (float32)
    for one chunk; grid (NC, BH). Centring: see ``_grad_qk``."""
    c, bh = tl.program_id(0), tl.program_id(1).to(tl.int64)
    rows = c * C + tl.arange(0, C)
    rm = rows < N
    acc = tl.full((C,), 0.0, tl.float32)
    acc_c = tl.full((C,), 0.0, tl.float32)
    for et in range(0, NE_T):
        eo = et * BE + tl.arange(0, BE)
        m = rm[:, None] & (eo < E)[None, :]
        off = bh * N * E + rows[:, None] * E + eo[None, :]
        g = tl.load(grad + off, m, 0.0).to(tl.float32)
        o = tl.load(out + off, m, 0.0).to(tl.float32)
        mb = tl.load(mean + (bh * NC + c) * E + eo, eo < E, 0.0)
        acc += tl.reduce(g * o, 1, tl.standard._sum_combine)
        acc_c += tl.reduce(g * (mb[None, :] - o), 1, tl.standard._sum_combine)
    d = tl.load(den + bh * N + rows, rm, 1.0)
    tl.store(gden + bh * N + rows, -acc / d, rm)
    tl.store(gden_c + bh * N + rows, acc_c / d, rm)


def _grad_qk(q, k, v, mean, grad, den, gden_c, s, z, r, rz, dq, dk, N, F, E, NC, NE_T,
             C: tl.constexpr, BF: tl.constexpr, BE: tl.constexpr, ELU1: tl.constexpr,
             PREC: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    """dQ, dK of one chunk and F-tile; grid (NC, BH, F tiles).

    Uncentred, with ``G = dO/den`` and ``dA = tril(G Vᵀ + dDen)``: ``dQ = dA K + G S_prevᵀ +
    dDen z_prevᵀ`` and ``dK = dAᵀQ + V Rᵀ + r``, R and r the sums over later chunks of ``QᵀG``
    and ``QᵀdDen``. When the values have a mean, ``G·v_j`` and ``dDen`` (and ``G S_prevᵀ`` and
    ``dDen z_prevᵀ``) are large and nearly cancel, which bf16 operands (rounded at 2⁻⁹) lose. So,
    as ``centred_product``, chunk c uses values ``V' = V − m_c`` (m_c the mean of the values
    before chunk c, v_0 for chunk 0: causal), exactly: ``dA = tril(G V'ᵀ + dDen')``, ``dQ = dA K
    + G S'ᵀ + dDen' z_prevᵀ`` with ``S' = S_prev − z_prev m_cᵀ`` formed in float32, and ``dK =
    dAᵀQ + V' Rᵀ + (r + R m_c)``, R and r uncentred float32 sums."""
    c, bh, ft = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    rows = c * C + tl.arange(0, C)
    fo = ft * BF + tl.arange(0, BF)
    rm, fm = rows < N, fo < F
    d = tl.load(den + bh * N + rows, rm, 1.0)
    gd = tl.load(gden_c + bh * N + rows, rm, 0.0)
    qm = rm[:, None] & fm[None, :]
    qx = tl.load(q + bh * N * F + rows[:, None] * F + fo[None, :], qm, 0.0)
    kx = tl.load(k + bh * N * F + rows[:, None] * F + fo[None, :], qm, 0.0)
    qb, kb = _phi(qx, qm, ELU1), _phi(kx, qm, ELU1)
    da = tl.full((C, C), 0.0, tl.float32)
    gq = tl.full((C, BF), 0.0, tl.float32)
    gk = tl.full((C, BF), 0.0, tl.float32)
    zb = tl.load(z + (bh * NC + c) * F + fo, fm, 0.0)
    rzb = tl.load(rz + (bh * NC + c) * F + fo, fm, 0.0)  # r, then r + R m_c
    for et in range(0, NE_T):
        eo = et * BE + tl.arange(0, BE)
        em = eo < E
        m = rm[:, None] & em[None, :]
        go = tl.load(grad + bh * N * E + rows[:, None] * E + eo[None, :], m, 0.0).to(tl.float32)
        go = (go / d[:, None]).to(qb.dtype)
        mb = tl.load(mean + (bh * NC + c) * E + eo, em, 0.0)
        vb = tl.load(v + bh * N * E + rows[:, None] * E + eo[None, :], m, 0.0)
        vb = tl.where(m, vb.to(tl.float32) - mb[None, :], 0.0).to(qb.dtype)
        da += tl.dot(go.to(DOT), tl.trans(vb).to(DOT), input_precision=PREC)
        so = ((bh * NC + c) * F + fo[:, None]) * E + eo[None, :]
        sm = fm[:, None] & em[None, :]
        sb = (tl.load(s + so, sm, 0.0) - zb[:, None] * mb[None, :]).to(qb.dtype)
        rf = tl.load(r + so, sm, 0.0)
        rzb += tl.reduce(rf * mb[None, :], 1, tl.standard._sum_combine)
        gq += tl.dot(go.to(DOT), tl.trans(sb).to(DOT), input_precision=PREC)
        gk += tl.dot(vb.to(DOT), tl.trans(rf.to(qb.dtype)).to(DOT), input_precision=PREC)
    i = tl.arange(0, C)
    da = tl.where(i[None, :] <= i[:, None], da + gd[:, None], 0.0).to(qb.dtype)
    gq += tl.dot(da.to(DOT), kb.to(DOT), input_precision=PREC) + gd[:, None] * zb[None, :]
    gk += tl.dot(tl.trans(da).to(DOT), qb.to(DOT), input_precision=PREC) + rzb[None, :]
    if ELU1:  # d(elu + 1)/dx = 1 (x > 0) or e^x (of x ≤ 0: no overflow), on float32 sums
        gq *= tl.where(qx > 0.0, 1.0, tl.exp(tl.minimum(qx.to(tl.float32), 0.0)))
        gk *= tl.where(kx > 0.0, 1.0, tl.exp(tl.minimum(kx.to(tl.float32), 0.0)))
    off = bh * N * F + rows[:, None] * F + fo[None, :]
    tl.store(dq + off, gq.to(qb.dtype), qm)
    tl.store(dk + off, gk.to(qb.dtype), qm)


def _grad_v(q, k, grad, den, r, dv, N, F, E, NC, NF_T, C: tl.constexpr, BF: tl.constexpr,
            BE: tl.constexpr, ELU1: tl.constexpr, PREC: tl.constexpr,
            DOT: tl.constexpr):  # fmt: skip
    """``dV = tril(QKᵀ)ᵀ G + K R`` of one chunk and E-tile (``G = dO/den``, R as in
    ``_grad_qk``); grid (NC, BH, E tiles)."""
    c, bh, et = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    rows = c * C + tl.arange(0, C)
    eo = et * BE + tl.arange(0, BE)
    rm, em = rows < N, eo < E
    scores = tl.full((C, C), 0.0, tl.float32)
    gv = tl.full((C, BE), 0.0, tl.float32)
    for ft in range(0, NF_T):
        fo, fm, qb, kb, sc = _qk_tile(q, k, bh * N * F, rows, rm, ft, F, BF, ELU1, PREC, DOT)
        scores += sc
        so = ((bh * NC + c) * F + fo[:, None]) * E + eo[None, :]
        rb = tl.load(r + so, fm[:, None] & em[None, :], 0.0).to(qb.dtype)
        gv += tl.dot(kb.to(DOT), rb.to(DOT), input_precision=PREC)
    m = rm[:, None] & em[None, :]
    off = bh * N * E + rows[:, None] * E + eo[None, :]
    d = tl.load(den + bh * N + rows, rm, 1.0)
    go = tl.load(grad + off, m, 0.0).to(tl.float32) / d[:, None]
    j = tl.arange(0, C)
    p = tl.where(j[None, :] <= tl.arange(0, C)[:, None], scores, 0.0).to(dv.dtype.element_ty)
    gv += tl.dot(tl.trans(p).to(DOT), go.to(dv.dtype.element_ty).to(DOT), input_precision=PREC)
    tl.store(dv + off, gv.to(dv.dtype.element_ty), m)


_KERNELS = (_states, _prefix, _readout, _delta, _grad_qk, _grad_v)
_HELPERS = (_phi, _qk_tile)  # device functions the kernels call (inlined by the compiler)


@functools.cache
def kernels(interpreted: bool) -> SimpleNamespace:
    """The kernels by name (``states``, ``prefix``, ...), compiled or run by Triton's interpreter.

    Both can live in one process: a CPU test's interpreted launch leaves the CUDA tests' compiled
    kernels compiled. The interpreter class is imported only when asked for.

    A kernel finds its helpers (``_HELPERS``) by global name, and a compiled kernel can call only
    a compiled helper, an interpreted one only an interpreted (or plain) one: so each mode's
    functions are copies of the module's with a globals dict of their own, in which the helper
    names are that mode's wrapped helpers (the module's own names stay plain functions).
    """
    if interpreted:
        from triton.runtime.interpreter import InterpretedFunction

        wrap = InterpretedFunction
    else:  # not triton.jit: under TRITON_INTERPRET=1 it would interpret (no sm_90 compile)
        wrap = triton.runtime.jit.JITFunction
    scope = dict(globals())  # the interpreter adds its names here, not to the module

    def bind(fn):
        copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__)
        copy.__annotations__ = fn.__annotations__  # tl.constexpr marks: not in __code__
        copy.__doc__, copy.__qualname__ = fn.__doc__, fn.__qualname__
        return wrap(copy)

    scope |= {fn.__name__: bind(fn) for fn in _HELPERS}
    return SimpleNamespace(**{fn.__name__.lstrip("_"): bind(fn) for fn in _KERNELS})
