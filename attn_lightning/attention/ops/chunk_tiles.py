"""Tiles of a chunked sequence, shared by ``causal_product`` and ``centred_product``.

Inputs are viewed as ``(B·H, n, C, ·)``: n chunks of C tokens per head. A tile is about
``tile_tokens`` tokens — several whole heads when a head is shorter than that, else consecutive
chunks of one head — so a tile's temporaries stay in cache between the matmuls that make them and
those that read them (``causal_product``'s docstring has the measurements). Both kinds of tile
are contiguous slices of the views: nothing is copied.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

Tile = tuple[slice, slice]  # (heads, chunks) of the (B·H, n, C, ·) views


def tiles(bh: int, n: int, c: int, tile_tokens: int) -> Iterator[Tile]:
    """Tiles of about ``tile_tokens`` tokens, each head's chunks in sequence order."""
    if n * c <= tile_tokens:
        g = max(1, tile_tokens // (n * c))  # whole heads per tile
        for h in range(0, bh, g):
            yield slice(h, min(h + g, bh)), slice(0, n)
        return
    per_tile = max(1, tile_tokens // c)  # chunks per tile, one head at a time
    for h in range(bh):
        for s in range(0, n, per_tile):
            yield slice(h, h + 1), slice(s, min(s + per_tile, n))


def flat(x: Tensor) -> Tensor:
    """``(g, m, C, ·) -> (g·m, C, ·)``: a view (tiles are contiguous slices)."""
    return x.view(-1, *x.shape[2:])


def prefix_sum(x: Tensor, acc: torch.dtype) -> Tensor:
    """Inclusive cumsum over dim 1 in ``acc``: in place when x already is (float32/64 inputs)."""
    return x.cumsum_(dim=1) if x.dtype == acc else x.cumsum(dim=1, dtype=acc)
