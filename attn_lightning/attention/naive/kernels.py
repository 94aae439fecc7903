"""Float64 references of the softmax and feature-map backends: softmax, linear, taylor, mean,
performer (and the kernel form every feature map is)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.naive.common import F64, normalised_mix, visible_keys
from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS


def naive_softmax(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    window: int | None = None,
    keep: Tensor | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """``softmax(q kᵀ · scale) v`` over the visible keys, and with a ``window`` w only those with
    ``|i - j| < w``; scale None means 1/√D. ``keep``: a (B, H, L, S) bool of the weights that
    survive attention dropout of probability ``dropout`` (the others are 0, these scaled by
    1/(1 - dropout))."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    logits = q @ k.transpose(-1, -2)  # (B, H, L, S)
    logits = logits / math.sqrt(q.shape[-1]) if scale is None else logits * scale
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    if window is not None:
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        allowed = allowed & ((i - j).abs() < window).to(q.device)
    weights = logits.masked_fill(~allowed, -math.inf).softmax(dim=-1)
    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)  # no key: 0, not NaN
    if keep is not None:
        weights = weights.masked_fill(~keep.to(weights.device), 0.0) / (1.0 - dropout)
    return weights @ v


def naive_kernel_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    offset: float = 0.0,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """``out_i = Σ_j φ(q_i)ᵀφ(k_j) v_j / (c + Σ_j φ(q_i)ᵀφ(k_j) + eps)`` as an L×S sum.

    Every feature-map backend is this with its own φ and offset c (given φ(q): (B, H, L, F)
    and φ(k): (B, H, S, F)).
    """
    phi_q, phi_k = phi_q.to(F64), phi_k.to(F64)
    sim = phi_q @ phi_k.transpose(-1, -2)  # (B, H, L, S)
    allowed = visible_keys(phi_q, phi_k, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=offset, eps=eps)


def _elu_plus_one(x: Tensor) -> Tensor:
    return F.elu(x) + 1


def _squared_relu(x: Tensor) -> Tensor:
    return F.relu(x) ** 2


# The element-wise feature maps of ``linear``, written with torch's reference functions.
LINEAR_FEATURE_MAPS: dict[str, Callable[[Tensor], Tensor]] = {
    "elu": _elu_plus_one,
    "relu": F.relu,
    "softplus": F.softplus,
    "squared_relu": _squared_relu,
}


def naive_linear(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    feature_map: str = "elu",
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
    rotary: bool = False,
) -> Tensor:
    """Linear attention: ``naive_kernel_attention`` with φ element-wise, offset 0; ``rotary``:
    RoFormer §3.3, ``Σ_j (R_i φ(q_i))ᵀ(R_j φ(k_j)) v_j / (Σ_j φ(q_i)ᵀφ(k_j) + eps)``."""
    phi = LINEAR_FEATURE_MAPS[feature_map]
    phi_q, phi_k = phi(q.to(F64)), phi(k.to(F64))
    if not rotary:
        return naive_kernel_attention(
            phi_q, phi_k, v, causal=causal, key_padding_mask=key_padding_mask, eps=eps
        )
    allowed = visible_keys(phi_q, phi_k, causal=causal, key_padding_mask=key_padding_mask)
    turned = torch.where(allowed, _rotated(phi_q) @ _rotated(phi_k).transpose(-1, -2), 0.0)
    den = torch.where(allowed, phi_q @ phi_k.transpose(-1, -2), 0.0).sum(-1, keepdim=True) + eps
    return turned @ v.to(F64) / den.masked_fill(den == 0, 1.0)


def _rotated(x: Tensor) -> Tensor:
    """RoFormer eq. 34 in float64: pair (x_2i, x_2i+1) of row t turned by t / 10000^(2i / D)."""
    n, d = x.shape[-2], x.shape[-1]
    t = torch.arange(n, dtype=F64)[:, None]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=F64) / d)
    cos, sin = (t * theta).cos(), (t * theta).sin()  # (N, D/2)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = even * cos - odd * sin
    out[..., 1::2] = even * sin + odd * cos
    return out


def naive_taylor(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    feature_dim: int | None = None,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Based's Taylor kernel as its scores: ``sim = 1 + s + s²/2``, ``s = ⟨q', k'⟩/√d'`` with q',
    k' the first ``feature_dim`` coordinates (None: all), offset 0."""
    d = q.shape[-1] if feature_dim is None else feature_dim
    s = q.to(F64)[..., :d] @ k.to(F64)[..., :d].transpose(-1, -2) / math.sqrt(d)
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(1 + s + s.square() / 2, v, allowed, offset=0.0, eps=eps)


def naive_mean(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, key_padding_mask: Tensor | None = None
) -> Tensor:
    """Mean pooling: ``out_i = mean_{j visible to i} v_j`` (q and k only set what is visible)."""
    weights = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask).to(F64)
    return weights @ v.to(F64) / weights.sum(dim=-1, keepdim=True).clamp_min(1.0)


def naive_performer_features(
    x: Tensor, w: Tensor, *, kernel: str, is_query: bool, stabilise: bool = True
) -> Tensor:
    """FAVOR+ φ(x) with ``x' = x·D^{-1/4}``: positive ``exp(Wx' − ‖x'‖²/2)/√m``, hyperbolic
    ``[exp(Wx'), exp(−Wx')]·exp(−‖x'‖²/2)/√(2m)``; queries shifted by their own max if asked
    (a per-token factor that cancels in the ratio)."""
    if kernel not in ("positive", "hyperbolic"):
        raise ValueError(f"no naive features for kernel {kernel!r}; allowed: positive, hyperbolic")
    x = x.to(F64) * x.shape[-1] ** -0.25
    proj = x @ w.to(F64).T  # (B, H, N, m)
    if kernel == "hyperbolic":
        proj = torch.cat([proj, -proj], dim=-1)  # (B, H, N, 2m)
    log_feats = proj - x.square().sum(-1, keepdim=True) / 2
    if is_query and stabilise:
        log_feats = log_feats - log_feats.amax(-1, keepdim=True).detach()
    return log_feats.exp() / math.sqrt(proj.shape[-1])


def naive_performer(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    w: Tensor,
    *,
    kernel: str = "positive",
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
    stabilise: bool = True,
) -> Tensor:
    """Performer with projection ``w: (m, D)``: its features used quadratically, offset 0."""
    phi_q = naive_performer_features(q, w, kernel=kernel, is_query=True, stabilise=stabilise)
    phi_k = naive_performer_features(k, w, kernel=kernel, is_query=False)
    return naive_kernel_attention(
        phi_q, phi_k, v, causal=causal, key_padding_mask=key_padding_mask, eps=eps
    )


def naive_cosformer(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    horizon: int | None = None,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """cosFormer: ``sim_ij = relu(q_i)ᵀrelu(k_j)·cos(π/2·(i − j)/M)`` with i, j counted from 1
    (queries and keys alike) and M = ``horizon``, or max(L, S) when None; offset 0."""
    m = horizon or max(q.shape[2], k.shape[2])
    i = torch.arange(1, q.shape[2] + 1, dtype=F64)[:, None]
    j = torch.arange(1, k.shape[2] + 1, dtype=F64)[None, :]
    sim = (F.relu(q.to(F64)) @ F.relu(k.to(F64)).mT) * torch.cos(math.pi / 2 * (i - j) / m)
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=0.0, eps=eps)
