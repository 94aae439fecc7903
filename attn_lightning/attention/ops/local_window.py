"""Sliding-window softmax by blocks: O(N·b·D) for ``softmax``'s ``window`` instead of SDPA's
masked O(N²·D).

Self-attention over N tokens cut into blocks of b ≥ w tokens (N padded to a multiple of b).
Query i may see key j only when ``|i - j| < w`` (and ``j ≤ i`` when causal), so a query block
needs the keys of its own block and its two neighbours (one, the previous, when causal): the
scores are ``(B, H, N/b, b, 3b)`` (or ``2b``) instead of ``(B, H, N, N)``, and autograd's
backward keeps them alone. The band, causality, padding and the blocks past either end are one
boolean mask; a query that sees no key gets 0 (never NaN), as through SDPA.

Shapes: ``q, k, v: (B, H, N, D|Dv)``, ``key_padding_mask: (B, N)`` bool, True = real key.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

MIN_BLOCK = 64  # tokens a block holds at least: small blocks are many small matmuls


def block_size(window: int) -> int:
    """b: the window, at least ``MIN_BLOCK`` tokens."""
    return max(window, MIN_BLOCK)


def uses_blocks(length: int, window: int, causal: bool) -> bool:
    """Whether the blocks do less work than the full (N, N) scores: ``(2 or 3)·b < N``."""
    return (2 if causal else 3) * block_size(window) < length


def _neighbours(x: Tensor, blocks: int, size: int, causal: bool) -> Tensor:
    """``(B, H, n·b, ·) -> (B, H, n, 2b or 3b, ·)``: each block's previous, own (and next)
    block of ``x``, zeros past either end."""
    pad = (0, 0, size, 0 if causal else size)
    x = F.pad(x, pad).unflatten(2, (blocks + (1 if causal else 2), size))
    parts = [x[:, :, :-1], x[:, :, 1:]] if causal else [x[:, :, :-2], x[:, :, 1:-1], x[:, :, 2:]]
    return torch.cat(parts, dim=3)


def local_window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int,
    causal: bool,
    key_padding_mask: Tensor | None,
    scale: float,
    dropout: float = 0.0,
) -> Tensor:
    """``softmax`` over the keys with ``|i - j| < window`` (module docstring), by blocks; with
    ``dropout`` p each weight is then zeroed with probability p and the rest scaled by 1/(1-p)."""
    n = q.shape[2]
    size = block_size(window)
    blocks = math.ceil(n / size)
    extra = blocks * size - n
    q, k, v = (F.pad(x, (0, 0, 0, extra)) for x in (q, k, v))
    kb, vb = (_neighbours(x, blocks, size, causal) for x in (k, v))
    qb = q.unflatten(2, (blocks, size))  # (B, H, n, b, D)
    scores = (qb @ kb.transpose(-1, -2)) * scale  # (B, H, n, b, 2b|3b)
    # Positions: query c·b + r; key (c - 1)·b + t for t over the 2b or 3b neighbours.
    starts = torch.arange(blocks, device=q.device)[:, None, None] * size
    i = starts + torch.arange(size, device=q.device)[:, None]
    j = starts - size + torch.arange(kb.shape[3], device=q.device)
    offset = i - j
    allowed = (offset.abs() < window) & (j >= 0) & (j < n)  # (n, b, 2b|3b)
    if causal:
        allowed = allowed & (offset >= 0)
    allowed = allowed[None, None]
    if key_padding_mask is not None:  # (B, N) -> (B, 1, n, 1, 2b|3b), through the same layout
        real = F.pad(key_padding_mask.to(q.dtype), (0, extra))[:, None, :, None]
        near = _neighbours(real, blocks, size, causal)[..., 0] > 0.5
        allowed = allowed & near[:, :, :, None, :]
    empty = ~allowed.any(dim=-1, keepdim=True)
    weights = scores.masked_fill(~(allowed | empty), -math.inf).softmax(dim=-1)
    if dropout:
        weights = F.dropout(weights, dropout)
    out = (weights @ vb).masked_fill(empty, 0.0)  # (B, H, n, b, Dv)
    return out.flatten(2, 3)[:, :, :n]
