"""Exact normalised power attention ``Σ_j d_ij^p v_j / (c + Σ_j d_ij^p)``, ``d = q'k'ᵀ``, by tiles.

Also the learned polynomial ``sim = max(0, Σ_i a_i d^i)`` in place of ``d^p`` (with the gradient
of the coefficients a). The quadratic reference form of ``polynomial`` (form ``exact``) written
as one autograd Function that works on a few heads at a time and recomputes the scores in
backward, as flash attention does. Plain autograd over the formula keeps four (B, H, L, S)
tensors for backward and makes about fifteen more in the two passes; at B·H = 64, L = S = 512
each is 67 MB, a fresh page-faulted allocation and a pass over memory, which made the exact form
3–8× slower than SDPA in training. Here the (L, S) temporaries exist for one tile of about
``TILE_ELEMENTS`` scores at a time and stay in cache; nothing quadratic is saved. Causal calls
tile by query blocks and never compute the future's tiles (``score_tiles``).

Shapes (heads flattened): ``q, k: (B·H, L|S, D)``, ``v: (B·H, S, E)``, ``blocked``: None,
``(L, S)`` or ``(B·H, L, S)`` bool, True where a key must not be seen (future or padding).
"""

from __future__ import annotations

import torch
from torch import Tensor

TILE_ELEMENTS = 1 << 20  # scores per tile on CPU: 4 MB in float32, cache-sized
GPU_TILE_ELEMENTS = 1 << 26  # elsewhere: 256 MB, few launches, memory still bounded
# Causal query blocks: rows per tile, each against the keys up to its last row. On the CPU small
# blocks also keep a tile's passes in cache: 32 rows were fastest of 16-256 at N 128-1,024 for
# Taylor's scores (1.4-2.5x the whole square). On a GPU fewer, larger launches.
QUERY_BLOCK = 32
GPU_QUERY_BLOCK = 512


def score_tiles(
    bh: int, length: int, keys: int, causal: bool, device: torch.device
) -> list[tuple[slice, slice, slice]]:
    """``(heads, queries, keys)`` slices covering the scores a tile at a time.

    Not causal (or short): every query against every key, as many heads as fit the budget.
    Causal: query blocks of ``QUERY_BLOCK`` rows against the keys up to their last row, so the
    future's tiles are never computed (a 1,024-token square in 32-row blocks computes 52 % of it).
    """
    cpu = device.type == "cpu"
    budget = TILE_ELEMENTS if cpu else GPU_TILE_ELEMENTS
    block = QUERY_BLOCK if cpu else GPU_QUERY_BLOCK
    rows = block if causal and length > block else length
    g = max(1, budget // max(1, rows * keys))
    tiles = []
    for i0 in range(0, length, rows):
        i1 = min(i0 + rows, length)
        cols = slice(0, min(i1, keys) if rows < length else keys)
        tiles += [(slice(h, min(h + g, bh)), slice(i0, i1), cols) for h in range(0, bh, g)]
    return tiles


def blocked_tile(blocked: Tensor | None, t: slice, rows: slice, cols: slice) -> Tensor | None:
    if blocked is None:
        return None
    if blocked.dim() == 2:
        return blocked[rows, cols]  # (L, S) broadcasts over the tile's heads
    return blocked[t, rows, cols]


def _horner(coefficients: Tensor, x: Tensor) -> Tensor:
    """``Σ_i a_i x^i`` for ``a = coefficients`` (1-D, lowest degree first), elementwise."""
    out = torch.full_like(x, 0.0).add_(coefficients[-1])
    for a in coefficients[:-1].flip(0):
        out.mul_(x).add_(a)
    return out


def _similarity(
    dot: Tensor, p: int, coefficients: Tensor | None
) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(sim, slope, active)`` of the scores ``dot`` (not modified), for backward.

    Power kernel: ``sim = d^p``, ``slope = d^{p-1}`` (d sim/dd is ``p·slope``: the caller
    multiplies by p last, the order of operations of the power kernel's earlier code, so its
    gradients are bit-identical to it), ``active = None``. Learned
    polynomial: ``sim = max(0, Σ a_i d^i)``; ``active`` is where the polynomial is ≥ 0 (where
    ``clamp_min`` passes gradients, at exactly 0 too, as autograd's does) and ``slope`` is
    ``Σ i·a_i d^{i-1}`` there, 0 elsewhere.
    """
    if coefficients is None:
        slope = dot.pow(p - 1)
        sim = slope * dot
        return sim, slope, None
    poly = _horner(coefficients, dot)
    active = poly >= 0
    degrees = torch.arange(1, coefficients.numel(), dtype=coefficients.dtype, device=dot.device)
    slope = _horner(coefficients[1:] * degrees, dot).mul_(active)
    return poly.clamp_min_(0.0), slope, active


class _ExactPolynomial(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        blocked: Tensor | None,
        causal: bool,
        p: int,
        c: float,
        coefficients: Tensor | None,
    ):
        bh, length, _ = q.shape
        out = v.new_empty(bh, length, v.shape[-1])
        den = v.new_empty(bh, length, 1)
        for t, rows, cols in score_tiles(bh, length, k.shape[1], causal, q.device):
            dot = torch.bmm(q[t, rows], k[t, cols].transpose(1, 2))  # (g, l, s)
            if coefficients is None:
                sim = dot.pow_(p)
            else:
                sim = _horner(coefficients, dot).clamp_min_(0.0)
            mask = blocked_tile(blocked, t, rows, cols)
            if mask is not None:
                sim.masked_fill_(mask, 0.0)  # neither numerator nor normaliser
            d = sim.sum(dim=-1, keepdim=True).add_(c)
            # c = 0 and every key blocked: num = den = 0, output 0 rather than NaN.
            d.masked_fill_(d == 0, 1.0)
            den[t, rows] = d
            out[t, rows] = torch.bmm(sim, v[t, cols]).div_(d)
        ctx.p, ctx.causal = p, causal
        ctx.save_for_backward(q, k, v, blocked, out, den, coefficients)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        q, k, v, blocked, out, den, coefficients = ctx.saved_tensors
        p = ctx.p
        dq = torch.empty_like(q)
        # Causal tiles overlap in keys: their dk, dv add up.
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)
        d_coefficients = None
        if coefficients is not None and ctx.needs_input_grad[7]:
            d_coefficients = torch.zeros_like(coefficients)
        for t, rows, cols in score_tiles(q.shape[0], q.shape[1], k.shape[1], ctx.causal, q.device):
            qt, kt, vt = q[t, rows], k[t, cols], v[t, cols]
            dot = torch.bmm(qt, kt.transpose(1, 2))  # recomputed: (g, l, s)
            sim, slope, active = _similarity(dot, p, coefficients)
            mask = blocked_tile(blocked, t, rows, cols)
            if mask is not None:
                sim.masked_fill_(mask, 0.0)
            # out = num/den: d num = dO/den; d den = −Σ_e dO·out/den, the same for every key.
            g_num = grad[t, rows] / den[t, rows]  # (g, l, E)
            g_den = (g_num * out[t, rows]).sum(dim=-1, keepdim=True).neg_()  # (g, l, 1)
            dv[t, cols] += torch.bmm(sim.transpose(1, 2), g_num)
            d_sim = torch.bmm(g_num, vt.transpose(1, 2)).add_(g_den)  # (g, l, s)
            if mask is not None:
                d_sim.masked_fill_(mask, 0.0)
            if d_coefficients is not None and active is not None:
                # d sim/d a_i = d^i where the polynomial is ≥ 0, else 0.
                d_poly = d_sim * active
                power = torch.ones_like(dot)
                for i in range(coefficients.numel()):
                    d_coefficients[i] += (d_poly * power).sum()
                    power.mul_(dot)
            d_dot = d_sim.mul_(slope)
            if coefficients is None:
                d_dot.mul_(p)  # d(d^p)/dd = p·d^{p-1}
            dq[t, rows] = torch.bmm(d_dot, kt)
            dk[t, cols] += torch.bmm(d_dot.transpose(1, 2), qt)
        return dq, dk, dv, None, None, None, None, d_coefficients


def blocked_keys(
    q: Tensor, k: Tensor, *, causal: bool, key_padding_mask: Tensor | None
) -> Tensor | None:
    """``blocked`` for ``exact_power_attention`` with ``q: (B, H, L, D)``, ``k: (B, H, S, D)``:
    None, the ``(L, S)`` future (shared by every head) or ``(B, 1, 1|L, S)`` with the padding
    (``key_padding_mask``: (B, S), True = real)."""
    blocked = None
    if causal:
        blocked = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).triu_(1)
    if key_padding_mask is not None:
        pad = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
        blocked = pad if blocked is None else pad | blocked
    return blocked


def exact_power_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    blocked: Tensor | None,
    causal: bool,
    degree: int,
    offset: float,
    coefficients: Tensor | None = None,
) -> Tensor:
    """``(B, H, L, D), (B, H, S, D), (B, H, S, E) -> (B, H, L, E)``; see the module docstring.

    ``blocked``: None, ``(L, S)`` or ``(B, 1|H, L, S)`` bool, True = key not allowed.
    ``causal``: ``blocked`` holds the future (query i sees keys ≤ i, as ``blocked_keys`` makes
    it), so tiles of later keys than a query block's last row are skipped, not computed.
    ``coefficients``: None for the power kernel ``d^degree``; else ``a_0..a_p`` (1-D, q's dtype,
    may require grad) of the learned polynomial ``max(0, Σ_i a_i d^i)``.
    """
    b, h, length, d = q.shape
    s, e = k.shape[2], v.shape[-1]
    if blocked is not None and blocked.dim() == 4:
        blocked = blocked.expand(b, h, length, s).reshape(b * h, length, s)
    out = _ExactPolynomial.apply(
        q.reshape(b * h, length, d),
        k.reshape(b * h, s, d),
        v.reshape(b * h, s, e),
        blocked,
        bool(causal),
        int(degree),
        float(offset),
        coefficients,
    )
    return out.view(b, h, length, e)
