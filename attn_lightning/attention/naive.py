"""Float64 O(N²) references of every backend, written plainly from the formulas.

One per registered backend, named ``naive_<name>`` (a test checks it). The fast paths (chunked
causal kernels, tiled power attention, Woodbury solves) are tested against these, outputs and
gradients, and the approximation study uses ``naive_softmax`` as its
ground truth. Nothing here is fast or clever on purpose: each function materialises the full
(B, H, L, S) similarity and masks it. Inputs are promoted to float64 (differentiably, so
gradients reach the caller's tensors). Shapes as in ``base.py``::

    q: (B, H, L, D)   k: (B, H, S, D)   v: (B, H, S, Dv)   ->   (B, H, L, Dv)

``key_padding_mask``: ``(B, S)`` bool, True = real token. A query that sees no key outputs 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.ops.linear_kernels import DEFAULT_EPS
from attn_lightning.attention.ops.qk_norm import LN_EPS

F64 = torch.float64


def visible_keys(q: Tensor, k: Tensor, *, causal: bool, key_padding_mask: Tensor | None) -> Tensor:
    """``(B, 1, L, S)`` bool: key j is visible to query i (not in the future, not padding)."""
    b, l_q, s = q.shape[0], q.shape[2], k.shape[2]
    allowed = torch.ones(b, 1, l_q, s, dtype=torch.bool, device=q.device)
    if causal:
        allowed = allowed & torch.ones(l_q, s, dtype=torch.bool, device=q.device).tril()
    if key_padding_mask is not None:
        allowed = allowed & key_padding_mask[:, None, None, :]
    return allowed


def normalised_mix(sim: Tensor, v: Tensor, allowed: Tensor, *, offset: float, eps: float) -> Tensor:
    """``Σ_j sim_ij v_j / (offset + Σ_j sim_ij + eps)`` over the allowed keys (``allowed``: (B, 1,
    L, S) bool), with every score kept in the sum; 0 for a query whose normaliser is exactly 0."""
    sim = torch.where(allowed, sim, 0.0)
    den = offset + sim.sum(dim=-1, keepdim=True) + eps
    return sim @ v.to(F64) / den.masked_fill(den == 0, 1.0)


def naive_softmax(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    scale: float | None = None,
    window: int | None = None,
) -> Tensor:
    """``softmax(q kᵀ · scale) v`` over the visible keys, and with a ``window`` w only those with
    ``|i - j| < w``; scale None means 1/√D."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    logits = q @ k.transpose(-1, -2)  # (B, H, L, S)
    logits = logits / math.sqrt(q.shape[-1]) if scale is None else logits * scale
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    if window is not None:
        i, j = torch.arange(q.shape[2])[:, None], torch.arange(k.shape[2])[None, :]
        allowed = allowed & ((i - j).abs() < window).to(q.device)
    weights = logits.masked_fill(~allowed, -math.inf).softmax(dim=-1)
    weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)  # no key: 0, not NaN
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
) -> Tensor:
    """Linear attention: ``naive_kernel_attention`` with φ element-wise, offset 0."""
    phi = LINEAR_FEATURE_MAPS[feature_map]
    return naive_kernel_attention(
        phi(q.to(F64)), phi(k.to(F64)), v, causal=causal, key_padding_mask=key_padding_mask, eps=eps
    )


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


def naive_bounded(
    x: Tensor,
    *,
    normalize: bool = True,
    norm: str = "learned",
    weight: Tensor | None = None,
    bias: Tensor | None = None,
) -> Tensor:
    """q' of ``qk_norm`` written out, with ``LN(x) = (x − mean) / √(population var + 1e-5)``:
    ``learned``: ``LN(x)·weight + bias`` (1 and 0 when None); ``fixed``: ``LN(x)·D^{-1/4}``;
    ``normalize=False`` or ``none``: ``x·D^{-1/4}``."""
    x = x.to(F64)
    scale = x.shape[-1] ** -0.25
    if not normalize or norm == "none":
        return x * scale
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).square().mean(-1, keepdim=True)
    x = (x - mean) / torch.sqrt(var + LN_EPS)
    if norm == "fixed":
        return x * scale
    if weight is not None:
        x = x * weight.to(F64)
    return x if bias is None else x + bias.to(F64)


Inputs = Callable[[Tensor], Tensor]


def naive_polynomial(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    degree: int = 4,
    coefficients: Tensor | None = None,
    normalize: bool = True,
    inputs: Inputs | None = None,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """Power attention ``A_ij = d^p / (1 + Σ_j d^p + eps)``, d = ⟨q', k'⟩; with
    ``coefficients`` a_0..a_p the learned polynomial ``max(0, Σ_i a_i d^i) / (Σ_j … + eps)``.
    ``inputs`` maps x to x' (default: ``naive_bounded`` at its initial learnable LN)."""
    bound = inputs or (lambda x: naive_bounded(x, normalize=normalize))
    d = bound(q) @ bound(k).mT
    if coefficients is None:
        sim, offset = d**degree, 1.0
    else:
        sim = sum(a * d**i for i, a in enumerate(coefficients.to(F64))).clamp_min(0.0)
        offset = 0.0
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=offset, eps=eps)


def naive_random_sketch(x: Tensor, s1: Tensor, s2: Tensor) -> Tensor:
    """The random PolySketch ``s(x) = √r · (x S1) ∘ (x S2)`` for ``S1, S2: (D, r)``."""
    x = x.to(F64)
    return math.sqrt(s1.shape[-1]) * (x @ s1.to(F64)) * (x @ s2.to(F64))


def naive_polysketch(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    sketch: Callable[[Tensor], Tensor],
    *,
    normalize: bool = True,
    inputs: Inputs | None = None,
    even_coefficients: Tensor | None = None,
    causal: bool = False,
    key_padding_mask: Tensor | None = None,
    eps: float = DEFAULT_EPS,
) -> Tensor:
    """PolySketch ``A_ij = ⟨s(q'), s(k')⟩² / (1 + Σ_j ⟨s(q'), s(k')⟩² + eps)`` for a sketch s
    (``naive_random_sketch``, the learned sketch module, or the identity for degree 2).

    ``even_coefficients`` (a_0, a_2[, a_4]): the learned even polynomial
    ``sim = a_0 + a_2 ⟨q', k'⟩² [+ a_4 ⟨s(q'), s(k')⟩²]``, normalised without the "1 +".
    ``inputs`` maps x to x' (default: ``naive_bounded`` at its initial learnable LN)."""
    bound = inputs or (lambda x: naive_bounded(x, normalize=normalize))
    qn, kn = bound(q), bound(k)
    sq, sk = sketch(qn), sketch(kn)  # (B, H, L, r), (B, H, S, r)
    if even_coefficients is None:
        sim, offset = (sq @ sk.transpose(-1, -2)) ** 2, 1.0  # (B, H, L, S)
    else:
        a = even_coefficients.to(F64)
        sim = a[0] + a[1] * (qn @ kn.transpose(-1, -2)) ** 2
        if len(a) > 2:
            sim = sim + a[2] * (sq @ sk.transpose(-1, -2)) ** 2
        offset = 0.0
    allowed = visible_keys(q, k, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=offset, eps=eps)


def naive_optimization(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    key_padding_mask: Tensor | None = None,
    dictionary: str = "values",
    iterations: int = 10,
    lam: float = 0.1,
    rho: float = 1.0,
    power: float = 5.0,
    signed: bool = False,
    exclude_self: bool = False,
    normalize: bool = False,
) -> Tensor:
    """Per batch, head and query: K steps of scaled ADMM on ``½‖q − Dm c‖² + λ‖c‖₁`` with
    ``M = inv(DmᵀDm + ρI)`` formed explicitly (S×S), then ``w_j = |z_j|^p / Σ_l |z_l|^p``
    (times sign(z_j) if signed) and ``out = Σ_j w_j v_j``. ``Dm`` holds the values (``dictionary=
    "values"``, needs Dv = D) or the keys as columns; padded tokens are zero columns with z_j
    pinned to 0; ``exclude_self`` pins z_ii too. No random tokens: the eval-mode output."""
    q, k, v = q.to(F64), k.to(F64), v.to(F64)
    tokens = {"values": v, "keys": k}[dictionary]  # (B, H, S, D)
    s = k.shape[2]
    outs = []
    for b in range(q.shape[0]):
        for h in range(q.shape[1]):
            qq, kk = q[b, h], tokens[b, h]
            if normalize:
                qq = qq / qq.norm(dim=-1, keepdim=True)
                kk = kk / kk.norm(dim=-1, keepdim=True)
            real = (
                torch.ones(s, dtype=torch.bool) if key_padding_mask is None else key_padding_mask[b]
            )
            dm = torch.where(real[:, None], kk, 0.0).T  # (D, S): the tokens as columns
            m = torch.linalg.inv(dm.T @ dm + rho * torch.eye(s, dtype=dm.dtype))
            for i in range(q.shape[2]):
                keep = real.clone()
                if exclude_self:
                    keep[i] = False
                z = u = torch.zeros(s, dtype=dm.dtype)
                for _ in range(iterations):
                    c = m @ (dm.T @ qq[i] + rho * (z - u))
                    x = c + u
                    z = torch.where(keep, x.sign() * (x.abs() - lam / rho).clamp_min(0), 0.0)
                    u = u + c - z
                a = z.abs() ** power
                w = a * z.sign() if signed else a
                w = w / a.sum() if a.sum() > 0 else torch.zeros_like(a)
                outs.append(w @ v[b, h])
    return torch.stack(outs).reshape(q.shape[0], q.shape[1], q.shape[2], v.shape[-1])


def naive_block_mixed(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    qn: Tensor,
    kn: Tensor,
    *,
    block: int,
    degree: int,
    causal: bool,
    key_padding_mask: Tensor | None = None,
    offset: float = 1.0,
    eps: float = 0.0,
) -> Tensor:
    """PolySketch's mixed block form: ``sim_ij = (qn_i·kn_j)^p`` when ``i // b == j // b``,
    else ``φ(q_i)·φ(k_j)``; ``out = Σ_j sim_ij v_j / (offset + Σ_j sim_ij + eps)`` over the
    visible keys, and 0 for a query that sees none when offset + eps = 0."""
    phi_q, phi_k, v, qn, kn = (t.to(F64) for t in (phi_q, phi_k, v, qn, kn))
    exact = (qn @ kn.transpose(-1, -2)) ** degree  # (B, H, L, S)
    sketched = phi_q @ phi_k.transpose(-1, -2)  # (B, H, L, S)
    query_block = torch.arange(qn.shape[2], device=qn.device) // block
    key_block = torch.arange(kn.shape[2], device=kn.device) // block
    near = query_block[:, None] == key_block[None, :]  # (L, S)
    sim = torch.where(near, exact, sketched)
    allowed = visible_keys(qn, kn, causal=causal, key_padding_mask=key_padding_mask)
    return normalised_mix(sim, v, allowed, offset=offset, eps=eps)


def naive_pool(
    v: Tensor,
    *,
    grid: tuple[int, int] | None = None,
    pool_size: int = 3,
    subtract_input: bool = True,
    key_padding_mask: Tensor | None = None,
) -> Tensor:
    """PoolFormer's mixer as a loop over each token's window: ``out_i`` = the mean of the real
    ``v_j`` with j in the k×k window around i on the ``grid`` (k tokens of the sequence when None),
    minus ``v_i`` if ``subtract_input``; 0 for a window with no real token. q and k play no part."""
    b, h, s, dv = v.shape
    rows, cols = grid if grid is not None else (1, s)
    half = pool_size // 2
    real = torch.ones(b, s, dtype=torch.bool) if key_padding_mask is None else key_padding_mask
    v = torch.where(real[:, None, :, None], v.to(F64), 0.0)
    out = torch.zeros(b, h, s, dv, dtype=F64)
    for i in range(s):
        r, c = divmod(i, cols)
        window = [
            rr * cols + cc
            for rr in range(r - half, r + half + 1)
            for cc in range(c - half, c + half + 1)
            if 0 <= rr < rows and 0 <= cc < cols
        ]
        for bb in range(b):
            seen = [j for j in window if real[bb, j]]
            if seen:
                out[bb, :, i] = v[bb, :, seen].mean(dim=1)
    return out - v if subtract_input else out
