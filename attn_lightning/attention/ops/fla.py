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
  ``c + eps + φ(q_i)ᵀΣ_{j≤i}φ(k_j)`` in float32 (as ``linear_kernels``), so PolySketch's ``1 +``,
  ``eps`` and "a query that sees no key gives 0" hold exactly as with the torch kernel. It is
  summed by chunks (``causal_normaliser``) from the features fla multiplies (rounded to bf16 for
  a bf16 call), so numerator and normaliser weigh the same scores and an output stays a weighted
  average of values. (A ones-column appended to v would pass through fla's bf16 state copies,
  and make Dv + 1 odd, which fla's bf16 dv kernel refuses.)

Precision: bf16 inputs run in bf16 (fla accumulates its state in float32, and keeps a bf16 copy
of it per chunk for the read-out); fp16 and fp32 inputs run in float32, which Triton computes as
TF32 on Ampere and later (fp16 features would overflow: Performer's key features reach
``e^{‖ω‖²/2}``). Which kernel a call runs is ``ops/dispatch.py``'s rule; this module only adapts
fla.

Widths (bf16 only, ``fla_widths``): fla-core 0.6.0's bf16 backward gives a wrong dv when the
value tile of its dv kernel is narrower than the key tile (measured: docs/benchmarks.md,
"Results: GPU"), so in bf16 v is zero-padded to the key tile when its own is narrower, and K and
V to even widths (fla asserts it). Zero channels are exact: a zero feature adds nothing to any
score, a zero value channel is sliced off. ``tests/attention/test_fla_cuda.py``'s strict-xfail
sentinel on fla's raw op fails the day fla's dv is right, and this padding can go.

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

from attn_lightning.attention.ops import fla_autotune
from attn_lightning.attention.ops.causal_normaliser import causal_normaliser

PACKAGE = "fla-core"
MIN_VERSION = (0, 5, 1)  # [B, T, H, K] layout, no head_first flag, the signatures used here
INSTALL = "pip install -e '.[gpu]' (or pip install 'fla-core>=0.5.1')"
HALF = (torch.float16, torch.bfloat16)
MAX_TILE = 128  # fla's widest dv-kernel tile (Hopper; 64 or 32 on smaller GPUs: the rule holds)

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


def chunk_op() -> ChunkOp:
    """fla's ``chunk_linear_attn`` (imported here, on first use), its autotuning as
    ``ATTN_LIGHTNING_FLA_AUTOTUNE`` asks (``fla_autotune``: ``full`` unless set)."""
    from fla.ops.linear_attn import chunk_linear_attn

    fla_autotune.apply()
    return chunk_linear_attn


def _tile(width: int) -> int:
    """The tile fla's bf16 dv kernel gives a K or V width (``chunk_bwd_dv``, fla-core 0.6.0)."""
    return min(max(1 << (width - 1).bit_length(), 16), MAX_TILE)


def fla_widths(num_features: int, value_dim: int, dtype: torch.dtype) -> tuple[int, int]:
    """The (K, V) widths fla runs for F features and Dv value channels in ``dtype`` (module
    docstring, "Widths"): unchanged except in bf16, where V is padded to the key tile when
    narrower, and both to even widths."""
    if dtype != torch.bfloat16:
        return num_features, value_dim
    key_tile = _tile(num_features)
    value = key_tile if _tile(value_dim) < key_tile else value_dim  # then Dv < key_tile
    return num_features + num_features % 2, value + value % 2


def _fla_layout(x: Tensor, dtype: torch.dtype, width: int) -> Tensor:
    """``(B, H, N, W) -> [B, T, H, width]`` contiguous in ``dtype``, zero channels after W: one
    copy at most (none when the tensor already lies that way, e.g. a head-split projection)."""
    x = x.transpose(1, 2)
    if width > x.shape[-1]:
        padded = x.new_zeros((*x.shape[:-1], width), dtype=dtype)
        padded[..., : x.shape[-1]] = x  # cast and lay out in the same pass
        return padded
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
    value_dim = v.shape[-1]
    width_k, width_v = fla_widths(phi_k.shape[-1], value_dim, compute)
    op = chunk_op() if op is None else op
    with torch.autocast(device_type=v.device.type, enabled=False):
        q_t, k_t = (_fla_layout(x, compute, width_k) for x in (phi_q, phi_k))  # [B, T, H, K]
        num, _ = op(q_t, k_t, _fla_layout(v, compute, width_v), scale=1.0, normalize=False)
        # From the features fla multiplied (bf16 in bf16), summed in float32: [B, T, H, 1].
        den = causal_normaliser(q_t, k_t, dim=1) + (offset + eps)
        # A query that sees no key (all masked, offset + eps = 0) has num = den = 0: give 0.
        den = den.masked_fill(den == 0, 1.0)
        # [B, T, H, Dv], padded channels dropped; a bf16 numerator is promoted in the division.
        out = num[..., :value_dim] / den
        return out.transpose(1, 2).to(v.dtype)


# fla's Based op: (q, k, v, scale) -> (Σ_{j≤i} sim_ij v_j, Σ_{j≤i} sim_ij); (B, H, T, ·) tensors.
BasedOp = Callable[[Tensor, Tensor, Tensor, float], tuple[Tensor, Tensor]]


def based_op() -> BasedOp:
    """fla's ``triton_parallel_based`` (imported here, on first use): Based's causal Taylor
    scores ``1 + s + s²/2``, ``s = scale·q_iᵀk_j``, by tiles that never hold the (T, T) matrix,
    forward and backward, returning the numerator and the normaliser separately."""
    from fla.ops.based.parallel import triton_parallel_based

    return triton_parallel_based


def fla_taylor_attention(
    qd: Tensor, kd: Tensor, v: Tensor, *, eps: float, op: BasedOp | None = None
) -> Tensor:
    """``taylor``'s causal score form with fla's parallel Based kernel (no padding mask: fla's
    kernel has none, and a masked key still adds the constant 1 however its k is zeroed).

    Args:
        qd, kd: ``(B, H, N, d')``, the coordinates the kernel reads (d' ≤ 128, fla's limit).
        v: ``(B, H, N, Dv)``; the output has its dtype.
        eps: the normaliser is ``eps + Σ_{j≤i} sim_ij`` (fla's own ``use_norm`` adds 1e-6).
        op: the ``(B, H, T, ·)`` op (default fla's ``triton_parallel_based``; the CPU tests pass
            one written from fla's naive reference, with the same signature).

    Returns:
        ``(B, H, N, Dv)``: ``Σ_{j≤i} sim_ij v_j / (eps + Σ_{j≤i} sim_ij)``, the normaliser ≥ 1/2.
    """
    compute = torch.bfloat16 if v.dtype == torch.bfloat16 else torch.float32
    op = based_op() if op is None else op
    with torch.autocast(device_type=v.device.type, enabled=False):
        q_c, k_c, v_c = (x.to(compute, memory_format=torch.contiguous_format) for x in (qd, kd, v))
        num, den = op(q_c, k_c, v_c, qd.shape[-1] ** -0.5)
        # Every query sees itself and each score is ≥ 1/2: no 0/0. Divided in float32.
        out = num.float() / (den.float()[..., None] + eps)
        return out.to(v.dtype)
