"""Chunked causal product ``out_i = Σ_{j≤i} (q_iᵀk_j) v_j`` with a hand-written backward.

The core of every causal feature-map attention (see ``linear_kernels``). Written as one
``autograd.Function`` because plain autograd over the chunked form keeps every intermediate and
adds a pass over memory per op; here forward saves only the masked chunk scores and the exclusive
chunk states, and backward is eight batched matmuls plus one reverse prefix sum.

Layout: inputs ``(B, H, N, F)``, ``(B, H, N, F)``, ``(B, H, N, E)`` with N a multiple of the
chunk size C, viewed as ``(B·H, n, C, ·)`` chunks. With ``A_c = tril(Q_c K_cᵀ)`` and inclusive
chunk states ``S_c = Σ_{c'≤c} K_c'ᵀ V_c'``::

    forward   O_c  = A_c V_c + Q_c S_{c-1}
    backward  dA_c = tril(dO_c V_cᵀ),  R_c = Σ_{c'>c} Q_c'ᵀ dO_c'
              dQ_c = dA_c K_c + dO_c S_{c-1}ᵀ
              dK_c = dA_cᵀ Q_c + V_c R_cᵀ
              dV_c = A_cᵀ dO_c + K_c R_c

Tiles (``chunk_tiles``): the work is done tile by tile, a tile being about ``tile_tokens`` tokens —
several whole heads, or consecutive chunks of one head, with the prefix state (forward) or the
suffix sum R (backward) carried from one tile to the next; a tile's temporaries (scores, chunk
states, their prefix sums) stay in cache between the matmuls that make them and those that read
them (on the CPU of docs/benchmarks.md, 4,096 tokens a tile cut fwd+bwd by 16-21 % against all
chunks at once). Off the CPU the default is one tile: a GPU's cost is kernel launches.

Exact: no term from a later position is ever added (and later subtracted), so the future cannot
leak even numerically. Cost ≈ 2·N·(C·(F+E) + 2·F·E) flops forward, twice that backward.

Precision: the products run in the inputs' dtype and the sums over chunks in float32 at least
(``accumulation_dtype``). For bfloat16 inputs every matmul is a bf16 GEMM (tensor cores on a GPU;
float32 accumulation inside each GEMM, output rounded to bf16 once); the prefix of chunk states
and the suffix sums of backward are float32, and the exclusive states are stored as the bf16
operand of the next GEMM (the rounding the GEMM would apply anyway). The *normalised* product in
bf16 runs centred (``centred_product``: its gradients would lose their precision otherwise).
float32 and float64 inputs take exactly the ops they always did (the casts are no-ops for them).

Finite inputs only where the mask is: ``tril(QKᵀ)V`` multiplies a later v by an exact 0, and
0·NaN = NaN, so a non-finite later value would reach earlier rows (in backward, a later k too).
``Attention.forward`` never passes one: it zeroes non-finite keys and values and sets the rows
that see them to NaN (``base``), which costs one sum instead of a where in every tile.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.base import accumulation_dtype
from attn_lightning.attention.ops.centred_product import CentredProduct
from attn_lightning.attention.ops.chunk_tiles import flat, prefix_sum, tiles

DEFAULT_TILE_TOKENS = 4096  # on CPU; a GPU gets one tile (its launches, not caches, are the cost)


def _with_ones(v: Tensor, normalised: bool) -> Tensor:
    """v, or ``[v, 1]`` (the normaliser's column) for one tile: a tile-sized copy, never N-sized."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1) if normalised else v


def _product_forward(
    q4: Tensor, k4: Tensor, v4: Tensor, shift: float | None, tile_tokens: int
) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
    """``O = tril(QKᵀ)V`` (divided by its normaliser if ``shift`` is given) on ``(B·H, n, C, ·)``
    chunks; also the scores, the exclusive states and the normaliser, which backward needs."""
    bh, n, c, f = q4.shape
    acc = accumulation_dtype(q4.dtype)
    normalised = shift is not None
    e = v4.shape[-1] + normalised  # the states carry the normaliser as one more column
    out = v4.new_empty(v4.shape)
    scores = q4.new_empty(bh, n, c, c)
    prev = q4.new_empty(bh, n, f, e)  # S_{c-1} as a GEMM operand; zeros for each first chunk
    den = q4.new_empty(bh, n, c, 1, dtype=acc) if normalised else None
    carry: Tensor | None = None  # inclusive state (acc) at the end of this head's previous tile
    for heads, chunks in tiles(bh, n, c, tile_tokens):
        if chunks.start == 0:
            carry = None
        qt, kt = flat(q4[heads, chunks]), flat(k4[heads, chunks])
        vt = _with_ones(flat(v4[heads, chunks]), normalised)
        st = flat(scores[heads, chunks])
        torch.bmm(qt, kt.transpose(1, 2), out=st).tril_()
        states = torch.bmm(kt.transpose(1, 2), vt)  # (g·m, F, E), one chunk's K_cᵀV_c each
        states = prefix_sum(states.view(-1, chunks.stop - chunks.start, f, e), acc)
        if carry is not None:
            states += carry
        pt = prev[heads, chunks]
        if carry is None:
            pt[:, 0].zero_()
        else:
            pt[:, 0].copy_(carry[:, 0])
        pt[:, 1:].copy_(states[:, :-1])
        carry = states[:, -1:]
        ot = flat(out[heads, chunks])
        if den is None or shift is None:  # both None together: not normalised
            torch.bmm(st, vt, out=ot).baddbmm_(qt, flat(pt))
            continue
        num = torch.bmm(st, vt).baddbmm_(qt, flat(pt))  # (g·m, C, E + 1), tile-sized
        dt = flat(den[heads, chunks])
        torch.add(num[..., -1:].to(acc), shift, out=dt)  # in acc: a bf16 sum would drop eps
        # A query that sees no key (all masked, shift = 0) has num = den = 0: output 0, not NaN.
        dt.masked_fill_(dt == 0, 1.0)
        torch.div(num[..., :-1], dt, out=ot)
    return out, scores, prev, den


def _product_backward(
    grad4: Tensor,
    q4: Tensor,
    k4: Tensor,
    v4: Tensor,
    saved: tuple[Tensor | None, Tensor, Tensor, Tensor | None],
    tile_tokens: int,
) -> tuple[Tensor, Tensor, Tensor]:
    out, scores, prev, den = saved
    bh, n, c, _ = q4.shape
    acc = accumulation_dtype(q4.dtype)
    normalised = den is not None
    dq, dk, dv = torch.empty_like(q4), torch.empty_like(k4), torch.empty_like(v4)
    carry: Tensor | None = None  # Σ of Q_c'ᵀ dO_c' over the later tiles of this head
    for heads, chunks in reversed(list(tiles(bh, n, c, tile_tokens))):
        if chunks.stop == n:
            carry = None
        qt, kt = flat(q4[heads, chunks]), flat(k4[heads, chunks])
        vt = _with_ones(flat(v4[heads, chunks]), normalised)
        st, pt = flat(scores[heads, chunks]), flat(prev[heads, chunks])
        gt = flat(grad4[heads, chunks])
        if out is not None and den is not None:  # both set together: normalised
            # out = num/den: d num = dO/den, d den = −Σ_e dO·out/den (the ones column's grad).
            dt = flat(den[heads, chunks])
            go = gt.new_empty(*gt.shape[:-1], gt.shape[-1] + 1)
            torch.div(gt, dt, out=go[..., :-1])
            torch.sum(go[..., :-1] * flat(out[heads, chunks]), -1, keepdim=True, out=go[..., -1:])
            go[..., -1:].neg_()
            gt = go
        d_scores = torch.bmm(gt, vt.transpose(1, 2)).tril_()
        torch.bmm(d_scores, kt, out=flat(dq[heads, chunks])).baddbmm_(gt, pt.transpose(1, 2))
        # R_c = Σ_{c'>c} Q_c'ᵀ dO_c': reverse exclusive prefix sum, plus the later tiles' carry.
        g = torch.bmm(qt.transpose(1, 2), gt).view(-1, chunks.stop - chunks.start, *pt.shape[1:])
        later = torch.empty_like(g, dtype=acc)
        if carry is None:
            later[:, -1].zero_()
        else:
            later[:, -1].copy_(carry[:, 0])
        if g.shape[1] > 1:
            suffix = prefix_sum(g[:, 1:].flip(1), acc).flip(1)
            if carry is not None:
                suffix += carry
            later[:, :-1].copy_(suffix)
        carry = later[:, :1] + g[:, :1]
        lt = flat(later).to(qt.dtype)  # the GEMM operand (a tile-sized cast for bf16 only)
        dkt = flat(dk[heads, chunks])
        torch.bmm(d_scores.transpose(1, 2), qt, out=dkt).baddbmm_(vt, lt.transpose(1, 2))
        dvt = flat(dv[heads, chunks])
        if normalised:  # v's ones column needs no gradient: only its first E columns are made
            gt, lt = gt[..., :-1], lt[..., :-1]
        torch.bmm(st.transpose(1, 2), gt, out=dvt).baddbmm_(kt, lt)
    return dq, dk, dv


class _CausalProduct(torch.autograd.Function):
    """Raw product, or (``shift`` given) normalised: ``num / (Σ_{j≤i} q_iᵀk_j + shift)``.

    The normaliser rides along as a ones column appended to each tile of v, and the division and
    its gradient happen inside the tile loop, so no N-sized concat, slice or divide (each a full
    pass over memory, and at N = 16,384 a fresh page-faulted allocation) is added around it.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, chunk: int, shift: float | None, tile: int):
        b, h, n, e = v.shape
        q4, k4, v4 = (x.contiguous().view(b * h, n // chunk, chunk, x.shape[-1]) for x in (q, k, v))
        out, scores, prev, den = _product_forward(q4, k4, v4, shift, tile)
        ctx.tile, ctx.normalised = tile, shift is not None
        extra = (out, den) if shift is not None else ()
        ctx.save_for_backward(q4, k4, v4, scores, prev, *extra)
        return out.view(b, h, n, e)

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        q4, k4, v4, scores, prev, *extra = ctx.saved_tensors
        out, den = extra if ctx.normalised else (None, None)
        shape = grad_out.shape
        # Contiguous first: a gradient arriving through a head merge is strided, and at B = 1
        # reshape would return a strided view that the tiles' flat views cannot take.
        grad4 = grad_out.contiguous().reshape(*q4.shape[:3], shape[-1])
        dq, dk, dv = _product_backward(grad4, q4, k4, v4, (out, scores, prev, den), ctx.tile)
        return dq.view(*shape[:3], -1), dk.view(*shape[:3], -1), dv.view(shape), None, None, None


def causal_product(
    q: Tensor, k: Tensor, v: Tensor, chunk: int, *, tile_tokens: int | None = None
) -> Tensor:
    """``out_i = Σ_{j≤i} (q_iᵀk_j) v_j`` for ``(B, H, N, ·)`` inputs with ``N % chunk == 0``."""
    tile_tokens = _check((q, k, v), chunk, tile_tokens)
    return _CausalProduct.apply(q, k, v, chunk, None, tile_tokens)


def normalised_causal_product(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    chunk: int,
    shift: float,
    *,
    tile_tokens: int | None = None,
) -> Tensor:
    """``Σ_{j≤i} (q_iᵀk_j) v_j / (shift + Σ_{j≤i} q_iᵀk_j)``; ``N % chunk == 0``."""
    tile_tokens = _check((q, k, v), chunk, tile_tokens)
    if q.dtype == torch.bfloat16:  # bf16 GEMMs, gradients kept precise by centring
        return CentredProduct.apply(q, k, v, chunk, float(shift), tile_tokens)
    return _CausalProduct.apply(q, k, v, chunk, float(shift), tile_tokens)


def _check(tensors: tuple[Tensor, ...], chunk: int, tile_tokens: int | None) -> int:
    """Validates the arguments; returns the tile size (None: the device's default)."""
    if len({t.dtype for t in tensors}) > 1:
        raise ValueError(
            "q, k, v must share a dtype (the products run in it), got "
            + ", ".join(str(t.dtype) for t in tensors)
        )
    q = tensors[0]
    if q.shape[2] % chunk:
        raise ValueError(f"sequence length {q.shape[2]} is not a multiple of chunk {chunk}")
    if tile_tokens is None:
        return DEFAULT_TILE_TOKENS if q.device.type == "cpu" else max(1, q.shape[:3].numel())
    if isinstance(tile_tokens, bool) or not isinstance(tile_tokens, int) or tile_tokens <= 0:
        raise ValueError(f"tile_tokens must be a positive int, got {tile_tokens!r}")
    return tile_tokens
