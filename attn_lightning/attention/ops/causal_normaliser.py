"""The causal normaliser ``φ(q_i)ᵀ Σ_{j≤i} φ(k_j)`` in float32, without a long strided scan.

The fla adapter (``ops/fla.py``) divides fla's numerator by this. Written as
``(phi_q * phi_k.cumsum(dim=2)).sum(-1)``, the cumsum along N of a ``(B, H, N, F)`` tensor is a
scan over a strided dimension, which CUDA runs with one thread per column (B·H·F of them) walking
all N rows in sequence; on an H100 it took most of the fla path's CUDA time (measured in
docs/benchmarks.md, "Results: GPU").

Here the prefix sum is taken by chunks of C tokens (``prefix_sum``)::

    within_c = cumsum over the C tokens of chunk c     (B·H·(N/C)·F columns, C rows each)
    starts_c = Σ_{c'<c} Σ_{j∈c'} φ(k_j)                (a scan over N/C chunk totals, laid out
                                                        so it runs along the contiguous last dim)
    Σ_{j≤i} φ(k_j) = within_c(i) + starts_c(i)

so no scan walks more than C rows with few threads, and the backward (autograd's reversed
cumsums of the same shapes) inherits that. Only sums and cumsums: no matmul, so TF32
(``torch.set_float32_matmul_precision("high")``, which the CLI sets) cannot round it, and the
result is float32 at least (float64 stays float64) whatever the features' dtype. Chunking only
regroups the additions: it is as exact as the single scan (closer to pairwise summation).

``dim`` names the token dimension, features last: the adapter sums in fla's ``[B, T, H, K]``
(``dim=1``), where its bf16 features already lie (half the bytes of float32, no copy). A CPU has
no starved threads to save (there the single scan is faster), and fla runs on CUDA only.
``chunk_size >= N`` is one chunk, i.e. the single strided scan this replaced.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import accumulation_dtype

DEFAULT_CHUNK = 64


def prefix_sum(x: Tensor, *, dim: int = 2, chunk_size: int = DEFAULT_CHUNK) -> Tensor:
    """``x.cumsum(dim)`` in ``accumulation_dtype(x.dtype)`` (float32 for half inputs, float64
    stays), by chunks of ``chunk_size`` along ``dim``; same shape as ``x``.

    Raises:
        ValueError: ``chunk_size`` below 1, or ``dim`` not a dimension of ``x``.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim must be a dimension of a {x.dim()}-d tensor, got {dim}")
    dim = dim % x.dim()
    acc = accumulation_dtype(x.dtype)
    n = x.shape[dim]
    c = max(1, min(chunk_size, n))
    pad = (-n) % c
    if pad:  # zero rows after the end change no earlier prefix
        x = F.pad(x, [0, 0] * (x.dim() - 1 - dim) + [0, pad])
    chunks = x.unflatten(dim, (-1, c))  # (…, M, C, …): M chunks of C rows
    # Half inputs are read as they are and summed into float32: no float32 copy of x.
    within = chunks.cumsum(dim + 1, dtype=acc)  # a scan of C rows, every other index in parallel
    totals = chunks.sum(dim + 1, dtype=acc).movedim(dim, -1)  # (…, M): chunk totals, M last
    # Exclusive prefix over chunks, a scan along the last dim (contiguous after cumsum's copy).
    starts = F.pad(totals.cumsum(-1)[..., :-1], (1, 0)).movedim(-1, dim)  # (…, M, …)
    return (within + starts.unsqueeze(dim + 1)).flatten(dim, dim + 1).narrow(dim, 0, n)


def causal_normaliser(
    phi_q: Tensor, phi_k: Tensor, *, dim: int = 2, chunk_size: int = DEFAULT_CHUNK
) -> Tensor:
    """``φ(q_i)ᵀ Σ_{j≤i} φ(k_j)`` over the tokens along ``dim``, features last: ``(B, H, N, F)``
    with ``dim=2`` (ours), ``[B, T, H, K]`` with ``dim=1`` (fla's). O(N·F) work and memory.

    No offset and no eps: the caller adds them (``fla.fla_causal_linear_attention``). Padded keys
    must already be zero rows of ``phi_k``; then they add exactly nothing.

    Returns:
        The features' shape with a last dim of 1, in ``accumulation_dtype`` (float32 for half).
    """
    prefix = prefix_sum(phi_k, dim=dim, chunk_size=chunk_size)
    return (phi_q * prefix).sum(dim=-1, keepdim=True)  # a half φ(q) is promoted in the product
