"""fla-core (flash-linear-attention) as the CUDA kernel of the causal feature-map product.

``fla.ops.linear_attn.chunk_linear_attn`` computes ``Σ_{j≤i} (q_iᵀk_j) v_j`` with fused Triton
kernels (forward and backward), where our chunked PyTorch kernel (``causal_product``) launches a
few dozen small ones per call. This module puts it under every feature-map backend without
changing their contract. fla's conventions (fla-core 0.5.1 … 0.6.x, read from its source) and
what the adapter does with each:

* layout ``[B, T, H, K]``; ours is ``(B, H, N, F)``: transposed here (free when q, k, v are the
  head-split views of a ``(B, N, H·D)`` projection, as in ``MultiHeadAttention``);
* ``scale`` defaults to ``K^{-1/2}``: we pass 1.0 (any scale is inside φ);
* ``normalize=True`` divides by ``scale·q_iᵀΣ_{j≤i}k_j + 1e-10`` with the cumulative sum in k's
  dtype and no offset. We call ``normalize=False`` and divide by our own normaliser,
  ``c + eps + φ(q_i)ᵀΣ_{j≤i}φ(k_j)`` in float32 (float32 at least, as ``linear_kernels``), so
  PolySketch's ``1 +``, ``eps``, a float32 normaliser under bf16/fp16 and "a query that sees no
  key gives 0" hold exactly as with the torch kernel.

Precision: bf16 inputs run in bf16 (fla accumulates its state in float32, and keeps a bf16 copy
of it per chunk for the read-out); fp16 and fp32 inputs run in float32, which Triton computes as
TF32 on Ampere and later (fp16 features would overflow: Performer's key features reach
``e^{‖ω‖²/2}``). ``auto`` takes the torch kernel everywhere for now (``AUTO_TAKES_FLA``: on an
H100 fla was slower at our shapes and its bf16 dv wrong for F != Dv, which ``fla`` refuses).

Only the causal product runs here. The non-causal product is two GEMMs (``linear_attention``) and
a decode ``step`` one rank-1 update: nothing for a fused kernel to save, so both kernels share
them, and a recurrent state (S, z) is the same float32 pair whichever kernel ran.

fla is imported on first use only: its import takes seconds and warns on a CPU-only machine.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from attn_lightning.attention.base import accumulation_dtype
from attn_lightning.attention.ops import fla_autotune

IMPLEMENTATIONS = ("auto", "torch", "fla")
PACKAGE = "fla-core"
MIN_VERSION = (0, 5, 1)  # [B, T, H, K] layout, no head_first flag, the signatures used here
INSTALL = "pip install -e '.[gpu]' (or pip install 'fla-core>=0.5.1')"
HALF = (torch.float16, torch.bfloat16)

# Whether ``auto`` runs fla on half-precision CUDA tensors. Off since the first GPU run (H100,
# fla-core 0.6.0, Triton 3.6, 2026-11-26; docs/benchmarks.md "Results: GPU"): (1) fla's bf16
# backward returned a wrong dv (relative error 17-84) whenever the feature dimension F differed
# from Dv (Performer, PolySketch: F = 64, Dv = 32), NaN in a Performer training step; (2) at the
# report's shapes (H = 4, D = 64, B·N = 64k tokens) fla's kernel, sequential over chunks within
# each (batch, head), was slower than the torch kernel from N = 1,024 up (fwd + bwd at N = 32k:
# 29.8 vs 4.5 ms). ``implementation: fla`` still runs it where it was right (F = Dv, or fp32).
AUTO_TAKES_FLA = False

# fla's chunk op: (q, k, v, *, scale, normalize) -> (out, final state); [B, T, H, ·] tensors.
ChunkOp = Callable[..., tuple[Tensor, Any]]


def installed_version() -> str | None:
    """The installed fla-core version, or None when it is not installed (nothing is imported)."""
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def _version_tuple(version: str) -> tuple[int, ...]:
    """``"0.6.0"`` -> ``(0, 6, 0)``; a piece without leading digits (``"dev1"``) counts 0."""
    return tuple(int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in version.split("."))


@functools.cache
def missing_reason() -> str | None:
    """Why fla cannot serve (not installed, too old, no ``fla`` module), or None when it can.

    Cached: ``auto`` asks on every CUDA call, and package metadata is read from disk.
    """
    version = installed_version()
    if version is None or importlib.util.find_spec("fla") is None:
        return f"{PACKAGE} is not installed"
    if _version_tuple(version) < MIN_VERSION:
        wanted = ".".join(map(str, MIN_VERSION))
        return f"{PACKAGE} {version} is installed, {wanted} or later is needed"
    return None


def check_installed(backend: str) -> None:
    """Raise when ``implementation='fla'`` cannot work here, naming the fix (one line).

    Raises:
        ModuleNotFoundError: fla-core is missing or older than ``MIN_VERSION``.
    """
    reason = missing_reason()
    if reason is not None:
        raise ModuleNotFoundError(
            f"attention {backend!r}: implementation 'fla' needs {PACKAGE}, but {reason}; "
            f"install it with {INSTALL}, or use implementation: auto or torch",
            name="fla",
        )


def choose(implementation: str, device_type: str, dtype: torch.dtype, *, installed: bool) -> str:
    """The dispatch rule, on plain facts: ``"fla"`` or ``"torch"`` for a causal product.

    ``auto`` takes the torch kernel while ``AUTO_TAKES_FLA`` is False (see there); were it True,
    it would take fla for CUDA tensors in bf16/fp16 when fla-core is installed. ``torch`` and
    ``fla`` are taken as asked (``resolve`` checks that ``fla`` can run).
    """
    if implementation == "auto":
        fla_ok = AUTO_TAKES_FLA and installed
        return "fla" if fla_ok and device_type == "cuda" and dtype in HALF else "torch"
    return implementation


def resolve(implementation: str, v: Tensor, *, backend: str) -> str:
    """``choose`` for a call whose values are ``v``, refusing an ``fla`` that cannot run.

    Raises:
        ValueError: ``fla`` asked for a tensor that is not on CUDA, or a float64 one.
        ModuleNotFoundError: ``fla`` asked for without fla-core (``check_installed``).
    """
    if implementation == "fla":
        if v.device.type != "cuda":
            raise ValueError(
                f"attention {backend!r}: implementation 'fla' runs on CUDA tensors, got a "
                f"{v.device.type} tensor; use implementation: auto (the torch kernel) or torch"
            )
        if v.dtype == torch.float64:
            raise ValueError(
                f"attention {backend!r}: implementation 'fla' has no float64 kernel; use "
                f"implementation: auto or torch for float64"
            )
        check_installed(backend)
        return "fla"
    # Only ``auto`` on a half-precision CUDA tensor needs to know (and the answer is cached).
    installed = implementation == "auto" and v.is_cuda and v.dtype in HALF
    installed = installed and missing_reason() is None
    return choose(implementation, v.device.type, v.dtype, installed=installed)


def chunk_op() -> ChunkOp:
    """fla's ``chunk_linear_attn`` (imported here, on first use), its autotuning as
    ``ATTN_LIGHTNING_FLA_AUTOTUNE`` asks (``fla_autotune``: ``full`` unless set)."""
    from fla.ops.linear_attn import chunk_linear_attn

    fla_autotune.apply()
    return chunk_linear_attn


def _fla_layout(x: Tensor, dtype: torch.dtype) -> Tensor:
    """``(B, H, N, ·) -> [B, T, H, ·]`` contiguous in ``dtype``: one copy at most (none when the
    tensor already lies that way in memory, e.g. a head-split view of a projection)."""
    x = x.transpose(1, 2)
    if x.dtype == dtype:  # ``to`` would return x itself, strided
        return x.contiguous()
    return x.to(dtype, memory_format=torch.contiguous_format)  # cast and lay out in one pass


def fla_causal_linear_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    *,
    offset: float,
    eps: float,
    op: ChunkOp | None = None,
) -> Tensor:
    """``linear_kernels.causal_linear_attention`` with fla's fused kernel for the numerator.

    Args:
        phi_q, phi_k: ``(B, H, N, F)`` features (padded keys already zero).
        v: ``(B, H, N, Dv)``; the output has its dtype.
        offset, eps: the normaliser is ``offset + eps + φ(q_i)ᵀΣ_{j≤i}φ(k_j)``.
        op: the ``[B, T, H, ·]`` product (default fla's ``chunk_linear_attn``; the CPU tests pass
            fla's own float reference, which has the same signature).

    Returns:
        ``(B, H, N, Dv)``: ``Σ_{j≤i} φ(q_i)ᵀφ(k_j) v_j / normaliser``, 0 where it is exactly 0.
    """
    compute = torch.bfloat16 if v.dtype == torch.bfloat16 else torch.float32
    if compute == torch.bfloat16 and phi_k.shape[-1] != v.shape[-1]:
        raise ValueError(
            f"implementation 'fla' in bfloat16 needs as many features as value channels, got "
            f"F = {phi_k.shape[-1]} features and Dv = {v.shape[-1]}: fla-core's bf16 backward "
            f"gave a wrong dv for F != Dv on an H100 (docs/benchmarks.md, Results: GPU); use "
            f"implementation: auto or torch, or float32 inputs"
        )
    op = chunk_op() if op is None else op
    acc = accumulation_dtype(v.dtype)
    with torch.autocast(device_type=v.device.type, enabled=False):
        q_t, k_t, v_t = (_fla_layout(x, compute) for x in (phi_q, phi_k, v))
        num, _ = op(q_t, k_t, v_t, scale=1.0, normalize=False)  # (B, N, H, Dv)
        phi_q, phi_k = phi_q.to(acc), phi_k.to(acc)
        den = (phi_q * phi_k.cumsum(dim=2)).sum(dim=-1, keepdim=True) + (offset + eps)
        # A query that sees no key (all masked, offset + eps = 0) has num = den = 0: give 0.
        den = den.masked_fill(den == 0, 1.0)
        return (num.transpose(1, 2).to(acc) / den).to(v.dtype)
