"""Triton kernels of the chunk-parallel causal product (``triton_causal`` launches them).

Plain functions, decorated twice by ``kernels``: compiled (``triton.jit``) for CUDA tensors, and
through Triton's interpreter for CPU tensors, so the CPU suite runs the very same kernel code
without changing what a CUDA call in the same process gets (``triton.jit`` picks one or the other
once, at decoration, from ``TRITON_INTERPRET``).

Layout: q, k, v and the output's gradient are ``(B, H, N, ·)`` with any strides but a unit last
one (the model's ``(B, N, H, D)`` projections transposed, read in place): each comes with its
batch, head and row strides (``s?b, s?h, s?n``) and H; a program moves its pointers to its
(b, h) once, in int64, and indexes its tiles from there in int32 (the launcher checks that a
head's rows fit). Outputs, normaliser and states are the launcher's, contiguous ``(BH, N, ·)``;
chunk c covers rows ``[c·C, c·C + C)``, the last one partial (rows ≥ N load as 0 and are never
stored). Per-chunk states ``(BH, NC, F, E)`` and key sums ``(BH, NC, F)`` are float32. Every
program tiles F and E by ``BF``/``BE`` (powers of two ≥ 16, ``tl.dot``'s minimum) so a wide φ
(PolySketch's F = 528) loops over tiles instead of holding an (F, E) block in registers.
``PREC`` is ``tl.dot``'s ``input_precision``; ``DOT`` the operands' type (bf16, fp16, or
float32 under the interpreter, whose ``tl.dot`` multiplies half bit patterns as integers).
``SPLIT``: a float32 operand of a half dot goes in as two (hi + lo, ``_split_dot``).

Sums are ``tl.reduce(x, axis, _sum)``, not ``tl.sum``: ``tl.sum`` (as
``tl.zeros``, hence ``tl.full``) is a ``@triton.jit`` function, compiled or interpreted once
at ``import triton``, and a compiled one cannot run inside an interpreted kernel; ``tl.reduce``
is a builtin the interpreter replaces per launch (and recognises ``_sum_combine``, ``_sum`` here,
as ``np.sum``).
For the same reason the device functions the kernels call (``_phi``, ``_qk_tile``) are wrapped per
mode with them (``kernels``). ``ELU1`` kernels read raw q, k and apply φ = elu + 1 on load.
"""

from __future__ import annotations

import functools
import types
from types import SimpleNamespace

import triton
import triton.language as tl

# tl.reduce's combine (the interpreter knows this object and sums with numpy); under
# TRITON_INTERPRET=1 at import it is an interpreted function, so ``kernels`` hands the compiled
# kernels a compiled copy.
_sum = tl.standard._sum_combine


def _at(ptr, bh, H, sb, sh):
    """The first row of head ``bh`` (= b·H + h) of a ``(B, H, N, ·)`` tensor, in int64."""
    return ptr + (bh // H) * sb + (bh % H) * sh


def _phi(x, mask, ELU1: tl.constexpr):
    """A loaded feature tile ``x`` as features: itself, or (ELU1) ``elu(x) + 1`` evaluated in
    float32 and rounded to x's dtype once (the unfused path's bf16 φ), 0 outside ``mask`` (a
    masked load's 0 would become φ(0) = 1, and a -inf key, a padded one, becomes 0)."""
    if ELU1:
        xf = x.to(tl.float32)
        xf = tl.where(xf > 0.0, xf + 1.0, tl.exp(tl.minimum(xf, 0.0)))  # no overflow untaken
        x = tl.where(mask, xf, 0.0).to(x.dtype)
    return x


def _split_dot(a, b32, acc, SPLIT: tl.constexpr, PREC: tl.constexpr, DOT: tl.constexpr):
    """``acc + a·b32`` with the float32 ``b32`` as a half operand: rounded once, or (SPLIT) as
    ``hi + lo``, both half, so the product keeps ~16 bits of b32 (two tensor-core dots)."""
    hi = b32.to(a.dtype)
    acc = tl.dot(a.to(DOT), hi.to(DOT), acc, input_precision=PREC)
    if SPLIT:
        lo = (b32 - hi.to(tl.float32)).to(a.dtype)
        acc = tl.dot(a.to(DOT), lo.to(DOT), acc, input_precision=PREC)
    return acc


def _dden(gp, sgn, o, mean, bh, c, rows, rm, d, N, E, NC, NE_T, BE: tl.constexpr,
          CENTRED: tl.constexpr):  # fmt: skip
    """``(dDen, dDen')`` of chunk c's rows, float32: ``dDen = −Σ_e dO·out / den`` and the centred
    ``dDen' = Σ_e dO·(m_c − out) / den`` (``_grad_qk``), over every E tile. ``gp``: dO at the
    head's first row; ``o``: out (float32 inputs) or, CENTRED, ``out − m_c`` as ``_readout`` keeps
    it (half inputs), to which the chunk's mean is added back in float32 for dDen."""
    op = o + bh * N * E
    acc, acc_c = d * 0.0, d * 0.0
    for et in range(0, NE_T):
        eo = et * BE + tl.arange(0, BE)
        m = rm[:, None] & (eo < E)[None, :]
        g = tl.load(gp + rows[:, None] * sgn + eo[None, :], m, 0.0).to(tl.float32)
        x = tl.load(op + rows[:, None] * E + eo[None, :], m, 0.0).to(tl.float32)
        mb = tl.load(mean + (bh * NC + c) * E + eo, eo < E, 0.0)
        if CENTRED:  # x = out − m_c
            acc += tl.reduce(g * (x + mb[None, :]), 1, _sum)
            acc_c -= tl.reduce(g * x, 1, _sum)
        else:
            acc += tl.reduce(g * x, 1, _sum)
            acc_c += tl.reduce(g * (mb[None, :] - x), 1, _sum)
    return -acc / d, acc_c / d


def _qk_tile(qp, kp, sqn, skn, rows, rm, ft, F, BF: tl.constexpr, ELU1: tl.constexpr,
             PREC: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    """F-tile ``ft`` of one chunk (``qp``, ``kp`` at the head's first row): its columns and their
    mask, the φ(Q), φ(K) tiles and their float32 scores ``φ(Q)φ(K)ᵀ`` (C × C)."""
    fo = ft * BF + tl.arange(0, BF)
    fm = fo < F
    m = rm[:, None] & fm[None, :]
    qb = _phi(tl.load(qp + rows[:, None] * sqn + fo[None, :], m, 0.0), m, ELU1)
    kb = _phi(tl.load(kp + rows[:, None] * skn + fo[None, :], m, 0.0), m, ELU1)
    return fo, fm, qb, kb, tl.dot(qb.to(DOT), tl.trans(kb).to(DOT), input_precision=PREC)


def _states(a, sab, sah, san, b, sbb, sbh, sbn, H, den, o, mean, gden_c, s, z, vs, t, tz, tv, N,
            F, E, NC, NS, NE_T, SEG, NB, C: tl.constexpr, BF: tl.constexpr, BE: tl.constexpr,
            SCALED: tl.constexpr, REVERSE: tl.constexpr, MEANS: tl.constexpr,
            ELU1: tl.constexpr, SPLIT: tl.constexpr, PREC: tl.constexpr, DOT: tl.constexpr,
            CENTRED: tl.constexpr):  # fmt: skip
    """Segment g's chunk states, formed and summed in one pass: grid (NS, BH, F·E tiles).

    The program walks the SEG chunks of its segment (REVERSE: from the last), writes each chunk's
    state *exclusive within the segment* (``s[c] = Σ_{c' in g, c' < c} A_c'ᵀB_c'``, float32,
    written once) and the segment's total ``t[g]``; a consumer adds to ``s[c]`` (``g = c // SEG``)
    the totals of the segments before g (REVERSE: after g), summed in its own program (NS small,
    the totals L2-resident), so no kernel runs between. So the serial depth is SEG chunks, not NC,
    and the segments run in parallel. ``A_cᵀB_c`` is ``φ(K_c)ᵀV_c``
    with ``z`` the key sums (forward); SCALED ``Q_cᵀ(dO_c/den)`` with dO/den a hi + lo pair under
    SPLIT (R's centring adds ``R m_c`` to ``r``, which cancels it to the size of the spread, so R
    must be good to more than the 8 bits of one bf16 operand) and ``z`` the sums of ``Q_cᵀdDen``,
    dDen formed here from dO, ``o`` and the means (``_dden``) by the E-tile-0 programs, and its
    centred dDen' written for ``_grad_qk`` (by the F-tile-0 one: float32, one value a row).
    MEANS (forward): also the float32 sums of v per chunk, for the centring means, in ``vs``/``tv``.
    """
    g, bh, tile = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    ft, et = tile // NE_T, tile % NE_T
    fo, eo = ft * BF + tl.arange(0, BF), et * BE + tl.arange(0, BE)
    fm, em = fo < F, eo < E
    m2 = fm[:, None] & em[None, :]
    st = fo[:, None] * E + eo[None, :]
    ap, bp = _at(a, bh, H, sab, sah), _at(b, bh, H, sbb, sbh)
    run = tl.full((BF, BE), 0.0, tl.float32)
    zrun = tl.full((BF,), 0.0, tl.float32)
    vrun = tl.full((BE,), 0.0, tl.float32)
    first = g * SEG
    count = tl.minimum(SEG, NC - first)
    for i in range(0, count):
        c = first + count - 1 - i if REVERSE else first + i
        rows = c * C + tl.arange(0, C)
        rm = rows < N
        am = rm[:, None] & fm[None, :]
        ab = _phi(tl.load(ap + rows[:, None] * san + fo[None, :], am, 0.0), am, ELU1)
        bb = tl.load(bp + rows[:, None] * sbn + eo[None, :], rm[:, None] & em[None, :], 0.0)
        tl.store(s + (bh * NC + c) * F * E + st, run, m2)
        if SCALED:
            d = tl.load(den + bh * N + rows, rm, 1.0)
            run = _split_dot(tl.trans(ab), bb.to(tl.float32) / d[:, None], run, SPLIT, PREC, DOT)
        else:
            run = tl.dot(tl.trans(ab).to(DOT), bb.to(DOT), run, input_precision=PREC)
        if et == 0:
            tl.store(z + (bh * NC + c) * F + fo, zrun, fm)
            if SCALED:
                w, wc = _dden(bp, sbn, o, mean, bh, c, rows, rm, d, N, E, NC, NE_T, BE, CENTRED)
                zrun += tl.reduce(ab.to(tl.float32) * w[:, None], 0, _sum)
                if ft == 0:
                    tl.store(gden_c + bh * N + rows, wc, rm)
            else:
                zrun += tl.reduce(ab.to(tl.float32), 0, _sum)
        if MEANS:  # noqa: SIM102 - a constexpr, folded at compile time, then a runtime test
            if ft == 0:
                tl.store(vs + (bh * NC + c) * E + eo, vrun, em)
                vrun += tl.reduce(bb.to(tl.float32), 0, _sum)
    tl.store(t + (bh * NS + g) * F * E + st, run, m2)
    if et == 0:
        tl.store(tz + (bh * NS + g) * F + fo, zrun, fm)
    if MEANS:  # noqa: SIM102 - as above
        if ft == 0:
            tl.store(tv + (bh * NS + g) * E + eo, vrun, em)


def _readout(q, sqb, sqh, sqn, k, skb, skh, skn, v, svb, svh, svn, H, mean, s, z, t, tz, vs,
             tv, tp, tzp, s_end, z_end, out, resid, den, shift, N, F, E, NC, NS, NF_T, SEG, NB,
             KEEP: tl.constexpr, C: tl.constexpr, BF: tl.constexpr, BE: tl.constexpr,
             ELU1: tl.constexpr, PREC: tl.constexpr, DOT: tl.constexpr):  # fmt: skip
    """``out = (tril(QKᵀ)V + Q S_prev) / den``, ``den = shift + rowsum tril(QKᵀ) + Q z_prev``, for
    one chunk and E-tile; grid (NC, BH, E tiles), with ``S_prev = s[c] + Σ_{g' < g} t[g']``
    (``_states``): the program sums the totals of the segments before its own (NS tiles at most,
    a few hundred KB in all, L2-resident), so no kernel runs between ``_states`` and this one. The
    first chunk of a segment keeps that prefix (``tp``, ``tzp``: the backward's), the last chunk
    writes the final state (every segment's total) to ``s_end``, ``z_end``.
    Saved: the float32 normaliser (1 where it is exactly 0), the chunk's centring mean m_c and
    (KEEP, half inputs) the centred output ``out − m_c`` in the inputs' dtype, from which backward
    forms ``dO·out`` and ``dO·(m_c − out)`` (``_dden``): rounded at 2⁻⁹ of the
    spread, not of |out| (bf16 out itself would swamp ``dO·(m_c − out)`` for values with a mean),
    and half the bytes of the float32 copy of out it replaces.

    Centred on m_c (``_grad_qk``; v's first value for chunk 0, else the sums of ``_states``' MEANS
    over the c·C earlier values), exactly: ``out = m_c + (tril(QKᵀ)V' + Q S' − m_c·shift) / den``
    with ``V' = V − m_c`` and ``S' = S_prev − z_prev m_cᵀ`` in float32: in bf16, ``Q S_prev`` has
    the size of z·|m_c| and its rounding would move out off the weighted average of the values
    that backward's cancellations assume. A query that sees no key (den 0) gives 0."""
    c, bh, et = tl.program_id(0), tl.program_id(1).to(tl.int64), tl.program_id(2)
    g = c // SEG
    rows = c * C + tl.arange(0, C)
    eo = et * BE + tl.arange(0, BE)
    rm, em = rows < N, eo < E
    qp, kp, vp = _at(q, bh, H, sqb, sqh), _at(k, bh, H, skb, skh), _at(v, bh, H, svb, svh)
    vm = rm[:, None] & em[None, :]
    vb = tl.load(vp + rows[:, None] * svn + eo[None, :], vm, 0.0)
    if c == 0:  # v's first row, taken from the tile (a one-row load would be scalar)
        first = tl.where((rows == 0)[:, None], vb.to(tl.float32), 0.0)
        mb = tl.reduce(first, 0, _sum)
    else:
        before = tl.full((BE,), 0.0, tl.float32)
        for gg in range(0, g):  # the values of the segments before g
            before += tl.load(tv + (bh * NS + gg) * E + eo, em, 0.0)
        before += tl.load(vs + (bh * NC + c) * E + eo, em, 0.0)
        mb = before / (c * C).to(tl.float32)
    tl.store(mean + (bh * NC + c) * E + eo, mb, em)
    scores = tl.full((C, C), 0.0, tl.float32)
    inter = tl.full((C, BE), 0.0, tl.float32)
    qz = tl.full((C,), 0.0, tl.float32)
    for ft in range(0, NF_T):
        fo, fm, qb, _kb, sc = _qk_tile(qp, kp, sqn, skn, rows, rm, ft, F, BF, ELU1, PREC, DOT)
        scores += sc
        st = fo[:, None] * E + eo[None, :]
        sm = fm[:, None] & em[None, :]
        tt = tl.full((BF, BE), 0.0, tl.float32)
        zt = tl.full((BF,), 0.0, tl.float32)
        for gg in range(0, g):  # the exclusive prefix of the segment totals
            tt += tl.load(t + (bh * NS + gg) * F * E + st, sm, 0.0)
            zt += tl.load(tz + (bh * NS + gg) * F + fo, fm, 0.0)
        if c % SEG == 0:  # the segment's first chunk keeps the prefix for the backward
            tl.store(tp + (bh * NS + g) * F * E + st, tt, sm)
            if et == 0:
                tl.store(tzp + (bh * NS + g) * F + fo, zt, fm)
        if c == NC - 1:  # the last chunk (g = NS - 1): the final state, every segment's total
            tl.store(s_end + bh * F * E + st, tt + tl.load(t + (bh * NS + g) * F * E + st, sm,
                                                           0.0), sm)  # fmt: skip
            if et == 0:
                tl.store(z_end + bh * F + fo, zt + tl.load(tz + (bh * NS + g) * F + fo, fm, 0.0),
                         fm)  # fmt: skip
        zb = tl.load(z + (bh * NC + c) * F + fo, fm, 0.0) + zt
        sb = tl.load(s + (bh * NC + c) * F * E + st, sm, 0.0)
        sb += tt - zb[:, None] * mb[None, :]
        inter = tl.dot(qb.to(DOT), sb.to(qb.dtype).to(DOT), inter, input_precision=PREC)
        qz += tl.reduce(qb.to(tl.float32) * zb[None, :], 1, _sum)
    j = tl.arange(0, C)
    vb = tl.where(vm, vb.to(tl.float32) - mb[None, :], 0.0).to(vb.dtype)
    # Numerator and normaliser weigh the same (rounded) scores: an output stays an average.
    p = tl.where(j[None, :] <= tl.arange(0, C)[:, None], scores, 0.0).to(vb.dtype)
    d = tl.reduce(p.to(tl.float32), 1, _sum) + qz + shift
    seen = d != 0.0
    d = tl.where(seen, d, 1.0)
    num = tl.dot(p.to(DOT), vb.to(DOT), inter, input_precision=PREC) - mb[None, :] * shift
    o = tl.where(seen[:, None], mb[None, :] + num / d[:, None], 0.0)
    oo = rows[:, None] * E + eo[None, :]
    tl.store(out + bh * N * E + oo, o.to(vb.dtype), vm)
    if KEEP:  # a query that sees no key: out 0, so out − m_c = −m_c
        tl.store(resid + bh * N * E + oo, (o - mb[None, :]).to(vb.dtype), vm)
    if et == 0:
        tl.store(den + bh * N + rows, d, rm)


_HELPERS = (_at, _phi, _split_dot, _dden, _qk_tile)  # device functions the kernels call (inlined)


def _configs(tile: str, *rows: tuple[int, int, int]) -> list[triton.Config]:
    """``(warps, stages, tile size)`` rows as ``triton.Config``s (``tile`` "": no tuned tile)."""
    return [
        triton.Config({tile: size} if tile else {}, num_warps=w, num_stages=st)
        for w, st, size in rows
    ]


# Autotuning of the compiled kernels: what each is timed over on its first launch per key, the
# first config the default (what the interpreter runs, and the static report's main row). Tile
# sizes are tuned only where they are a loop tile inside a program (grad_v's F tiles, grad_qk's
# E tiles): the grid's tiles, the chunk C (the states' layout) and ``states``' tiles are the
# launcher's, and so are readout's F tiles (its tile count, passed, is the int 1 at F ≤ 64 that
# Triton specialises on; counted in the kernel from a tuned BF it compiled to 24 wgmma, not 40).
# Each tuned tile is capped by its width (``_clip``). Pruned by an sm_90 compile of every
# candidate of 4 / 8 warps, 2 / 3 stages (1 / 2 for grad_qk) and tiles 32 / 64
# (``lab.benchmarks.triton_static``; bf16 and fp16, D 64 and 128, B 2, H 4–32, N 16k–32k): what
# spilled is left out — ``states`` at 4 warps (16 B, backward, D 128), readout at 4 warps (320 B),
# grad_qk at 4 warps (212–620 B) or with E tiles of 64 at D 64 (276–308 B: its merged dV's tiles)
# — and so is a stage count that compiled to the same kernel (no loop the pipeliner takes).
CONFIGS: dict[str, list[triton.Config]] = {
    "states": _configs("", (8, 3, 0), (8, 2, 0)),
    "readout": _configs("", (8, 3, 0)),  # one config: nothing to time
    "grad_qk": _configs("BE", (8, 1, 32), (8, 1, 16)),
    "grad_v": _configs("BF", (4, 3, 64), (8, 3, 64), (4, 3, 32), (8, 3, 32)),
}
# The autotuner's key: the padded widths F, E (multiples of 16), the N bucket NB
# (``n_bucket``), the constexprs that change what a kernel does, and (added by Triton) every
# tensor argument's dtype. One timing per key per process (``Autotuner.cache``); with
# ``cache_results`` the timings also go to Triton's cache (``TRITON_CACHE_DIR``, default
# ~/.triton/cache), so a later process with the same kernel source, GPU and key reuses them.
KEYS: dict[str, list[str]] = {
    "states": ["F", "E", "NB", "SCALED", "ELU1"],
    "readout": ["F", "E", "NB", "ELU1", "KEEP"],
    "grad_qk": ["F", "E", "NB", "ELU1", "MERGE_V"],
    "grad_v": ["F", "E", "NB", "ELU1"],
}
_TILE_WIDTH = {"BF": "F", "BE": "E"}


def n_bucket(n: int) -> int:
    """The autotuner's N bucket: ``⌈log2 N⌉`` (0 for N ≤ 1), so N = 4,097 … 8,192 share a timing
    and the choice is redone only when N doubles."""
    return max(0, (n - 1).bit_length())


def _clip(configs: list[triton.Config], named: dict, **_: object) -> list[triton.Config]:
    """``configs`` with each tuned tile capped at its width's tile (a power of two ≥ 16 covering
    F or E: a wider tile would only compute on masked zeros), duplicates dropped, order kept;
    the autotuner's ``early_config_prune`` and the interpreter's choice of the default."""
    kept: dict[tuple, triton.Config] = {}
    for cfg in configs:
        kw = {
            t: min(size, max(16, triton.next_power_of_2(named[_TILE_WIDTH[t]])))
            for t, size in cfg.kwargs.items()
        }
        new = triton.Config(kw, num_warps=cfg.num_warps, num_stages=cfg.num_stages)
        kept.setdefault((tuple(kw.items()), cfg.num_warps, cfg.num_stages), new)
    return list(kept.values())


class _Default:
    """An interpreted kernel launched with its first (clipped) config, never timed: Triton's
    ``Autotuner`` would time every config with ``do_bench``, which needs a GPU (under
    ``TRITON_INTERPRET=1`` it only turns its disk cache off). Launched as a kernel,
    ``k[grid](*args, **kwargs)``."""

    def __init__(self, fn, configs: list[triton.Config], names: list[str]) -> None:
        self.fn, self.configs, self.names = fn, configs, names

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            cfg = _clip(self.configs, dict(zip(self.names, args)) | kwargs)[0]
            return self.fn[grid](*args, **kwargs, **cfg.kwargs, num_warps=cfg.num_warps,
                                 num_stages=cfg.num_stages)  # fmt: skip

        return launch


@functools.cache
def kernels(interpreted: bool) -> SimpleNamespace:
    """The kernels by name (``states``, ``readout`` and ``triton_causal_grads``'s
    ``grad_qk``, ``grad_v``): compiled and autotuned (``triton.autotune`` over ``CONFIGS``,
    keyed by ``KEYS``), or run by Triton's interpreter with the default config (``_Default``).

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

    from attn_lightning.attention.ops import triton_causal_grads as grads  # imports this module

    scope |= {fn.__name__: bind(fn) for fn in _HELPERS}
    if not interpreted and not isinstance(_sum, triton.runtime.jit.JITFunction):
        scope["_sum"] = triton.runtime.jit.JITFunction(_sum.fn)
    out = {}
    for fn in (_states, _readout, grads._grad_qk, grads._grad_v):
        name = fn.__name__.lstrip("_")
        names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
        if interpreted:
            out[name] = _Default(bind(fn), CONFIGS[name], list(names))
        else:  # outputs are only written, never read back: timing runs may repeat a launch
            tune = triton.autotune(CONFIGS[name], key=KEYS[name], cache_results=True,
                                   prune_configs_by={"early_config_prune": _clip})  # fmt: skip
            out[name] = tune(bind(fn))
    return SimpleNamespace(**out)
