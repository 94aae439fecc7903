"""Kernels for attention of the form ``out_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (c + φ(q_i)ᵀ Σ_j φ(k_j))``.

Shared by every feature-map backend (linear, performer, polynomial sketch, mean pooling): they
differ only in φ and the normaliser offset ``c`` (0 for Katharopoulos/Performer, 1 for
PolySketchFormer). Shapes::

    phi_q: (B, H, L, F)   phi_k: (B, H, S, F)   v: (B, H, S, Dv)   ->   (B, H, L, Dv)

All sums (states ``S = Σ φ(k) vᵀ``, normalisers ``z = Σ φ(k)``) are accumulated in float32 at
least (float64 stays float64), with autocast disabled: fp16/bf16 prefix sums overflow or lose
all precision at long lengths. Key padding is the caller's job: zero the rows of ``phi_k`` (and of
``v``, which ``Attention.forward`` does: a padded NaN would survive the 0 in ``φ(k)ᵀv``).

Causal form (``causal_linear_attention``): chunked, as in flash-linear-attention's ``chunk`` and
PolySketchFormer's block-lower-triangular multiply. With chunks of C tokens::

    intra:  tril(Q_c K_cᵀ) V_c                (exact masked product inside a chunk)
    inter:  Q_c S_{c-1},  S_c = Σ_{c'≤c} K_c'ᵀ V_c'   (prefix state across chunks)

All chunks are processed at once with batched matmuls and one cumsum over chunk states (with a
hand-written backward, ``causal_product``), so the (B, H, N, F, Dv) tensor of the textbook cumsum
form is never materialised: extra memory is (B, H, N/C, F, Dv) + (B, H, N, C).
Cost O(N·C·(F + Dv) + N·F·Dv).

The causal product's matmuls run in ``product_dtype``: bfloat16 for bfloat16 values (half-precision
GEMMs, tensor cores on a GPU, float32 prefix states and normaliser: ``causal_product``), float32
at least otherwise. fp16 stays float32: the normaliser φ(q)ᵀΣφ(k) outgrows fp16's 65,504 at long
lengths, and bf16 has float32's range.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import State, accumulation_dtype
from attn_lightning.attention.ops.causal_product import normalised_causal_product

DEFAULT_EPS = 1e-6


def _no_autocast(device: torch.device):
    return torch.autocast(device_type=device.type, enabled=False)


def finish(num: Tensor, den: Tensor, offset: float, eps: float, out_dtype: torch.dtype) -> Tensor:
    """``num / (den + offset + eps)`` in ``out_dtype``: ``num (…, L, Dv)``, ``den (…, L)``."""
    den = den + (offset + eps)
    # A query that sees no key (all masked, eps = 0) has num = den = 0: give 0, never 0/0 = NaN.
    den = den.masked_fill(den == 0, 1.0)
    return (num / den.unsqueeze(-1)).to(out_dtype)


class _LinearProduct(torch.autograd.Function):
    """Non-causal ``φ(Q)[KV, z] / (φ(Q)z + shift)`` with a hand-written backward.

    The normaliser z = Σ_j φ(k_j) rides along as one more column of the state, so the numerator
    and the normaliser come from one matmul each way; plain autograd would add an (L, F) and an
    (S, F) gradient buffer and their sums for z's separate path.
    """

    @staticmethod
    def forward(ctx, phi_q: Tensor, phi_k: Tensor, v: Tensor, shift: float):
        state = torch.cat(
            [phi_k.transpose(-1, -2) @ v, phi_k.sum(dim=-2).unsqueeze(-1)], dim=-1
        )  # (B, H, F, Dv + 1) = [Σ φ(k)vᵀ, Σ φ(k)]
        num = phi_q @ state  # (B, H, L, Dv + 1)
        den = num[..., -1:] + shift
        # A query that sees no key (all masked, shift = 0) has num = den = 0: output 0, not NaN.
        den.masked_fill_(den == 0, 1.0)
        out = num[..., :-1] / den
        ctx.save_for_backward(phi_q, phi_k, v, state, out, den)
        return out

    @staticmethod
    def backward(ctx, grad: Tensor):
        phi_q, phi_k, v, state, out, den = ctx.saved_tensors
        # out = num/den: d num = dO/den, d den = −Σ_e dO·out/den.
        go = torch.cat([grad, -(grad * out).sum(-1, keepdim=True)], dim=-1).div_(den)
        d_phi_q = go @ state.transpose(-1, -2)  # (B, H, L, F)
        d_state = phi_q.transpose(-1, -2) @ go  # (B, H, F, Dv + 1)
        d_kv, d_z = d_state[..., :-1], d_state[..., -1]
        d_phi_k = (v @ d_kv.transpose(-1, -2)).add_(d_z.unsqueeze(-2))  # (B, H, S, F)
        d_v = phi_k @ d_kv  # (B, H, S, Dv)
        return d_phi_q, d_phi_k, d_v, None


def linear_attention(
    phi_q: Tensor, phi_k: Tensor, v: Tensor, *, offset: float = 0.0, eps: float = DEFAULT_EPS
) -> Tensor:
    """Non-causal kernel attention in O(N·F·Dv); L may differ from S."""
    acc = accumulation_dtype(v.dtype)
    with _no_autocast(v.device):
        phi_q, phi_k, vv = phi_q.to(acc), phi_k.to(acc), v.to(acc)
        return _LinearProduct.apply(phi_q, phi_k, vv, float(offset + eps)).to(v.dtype)


def product_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the causal product's matmuls run in for values of ``dtype`` (module docstring)."""
    return dtype if dtype == torch.bfloat16 else accumulation_dtype(dtype)


def causal_linear_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    *,
    chunk_size: int = 64,
    offset: float = 0.0,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Causal kernel attention by chunks (see module docstring); requires L == S."""
    n = phi_q.shape[2]
    dtype = product_dtype(v.dtype)
    c = max(1, min(chunk_size, n))
    pad = (-n) % c
    with _no_autocast(v.device):
        phi_q, phi_k, vv = phi_q.to(dtype), phi_k.to(dtype), v.to(dtype)
        if pad:  # zero keys add nothing; rows of padded queries are dropped below
            phi_q, phi_k, vv = (F.pad(t, (0, 0, 0, pad)) for t in (phi_q, phi_k, vv))
        out = normalised_causal_product(phi_q, phi_k, vv, c, offset + eps)
        return out[:, :, :n].to(v.dtype)


def linear_attention_step(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    state: State | None,
    *,
    offset: float = 0.0,
    eps: float = DEFAULT_EPS,
) -> tuple[Tensor, State]:
    """One recurrent step: ``S += φ(k)vᵀ``, ``z += φ(k)``, ``out = φ(q)ᵀS / (c + φ(q)ᵀz)``.

    Args:
        phi_q, phi_k: ``(B, H, 1, F)``; v: ``(B, H, 1, Dv)``.
        state: ``(S: (B, H, F, Dv), z: (B, H, F))`` in the accumulation dtype, or None.
    """
    acc = accumulation_dtype(v.dtype)
    with _no_autocast(v.device):
        phi_q, phi_k, vv = phi_q.to(acc), phi_k.to(acc), v.to(acc)
        kv = phi_k.transpose(-1, -2) @ vv  # (B, H, F, Dv)
        z_new = phi_k.squeeze(-2)  # (B, H, F)
        if state is not None:
            s_prev, z_prev = state
            kv = kv + s_prev
            z_new = z_new + z_prev
        num = phi_q @ kv  # (B, H, 1, Dv)
        den = (phi_q @ z_new.unsqueeze(-1)).squeeze(-1)  # (B, H, 1)
        return finish(num, den, offset, eps, v.dtype), (kv, z_new)
