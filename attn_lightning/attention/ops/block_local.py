"""PolySketch's mixed form: exact power attention inside blocks, a feature map between them.

Kacham, Mirrokni, Zhong, "PolySketchFormer", ICML 2024, arXiv 2310.01655, section on local
exact attention. Positions are cut into blocks of b tokens aligned at 0 (block of i = i // b);
``near(i)`` are the keys of i's own block, ``far(i)`` all others::

    sim_ij = (qn_i · kn_j)^p          j in near(i)   (exact, p even)
    sim_ij = φ(q_i) · φ(k_j)          j in far(i)    (the sketch's features, ≥ 0)
    out_i  = Σ_{j allowed} sim_ij v_j / (offset + Σ_{j allowed} sim_ij + eps)

with "allowed" = not in the future (causal) and not padding. Why: a sketch's error is relative
to the size of the score, and the largest scores are mostly between nearby tokens, so computing
the diagonal blocks exactly recovers most of the quality lost to sketching (the paper reports
better perplexity), while the far part keeps the linear-time feature-map form. It is also what
the block-lower-triangular multiply of the causal kernel computes anyway, only with a different
score on the diagonal blocks.

Shapes::

    phi_q: (B, H, L, F)   phi_k: (B, H, S, F)   v: (B, H, S, Dv)
    qn:    (B, H, L, D)   kn:    (B, H, S, D)   key_padding_mask: (B, S) bool, True = real key
    ->  (B, H, L, Dv)

Both functions work on nb = ⌈N/b⌉ blocks of shape ``(B, H, nb, b, ·)``, v carrying one more
column of ones so that the normaliser comes out of the same matmuls as the numerator:

* causal: per-block states ``KV_c = Φ_kcᵀ [V_c, 1]`` (F × (Dv+1)), exclusive prefix over blocks,
  far = ``Φ_qc · prefix_c``; near = ``tril((Qn_c Kn_cᵀ)^p) [V_c, 1]``.
* non-causal (L may differ from S): far = ``Φ_qc (KV_total − KV_c)``, near the full in-block
  ``(Qn_c Kn_cᵀ)^p [V_c, 1]``; query blocks past the last key block have no near keys.

Cost: O(N·b·(D + Dv)) for the near part plus O(N·F·Dv) for the far part, i.e. linear in N for a
fixed b; extra memory (B, H, N/b, F, Dv+1) for the block states and (B, H, N/b, b, b) for the
in-block scores. Padding N up to a multiple of b adds zero keys (φ = 0, kn = 0 so
``(qn·0)^p = 0``) and query rows that are dropped, so it changes nothing.

Masked keys are zeroed here (φ(k), kn and v), not multiplied by 0: a garbage or NaN padded key
would otherwise survive ``0·x``. Everything is plain torch ops, so autograd gives the backward.

Dtype: the inputs are promoted to a common dtype of at least float32 and the result is returned
in it; autocast is the caller's to disable (an fp16 ``(qn·kn)^p`` or prefix sum loses precision).

``block_mixed_step`` is the recurrent form for decoding, O(F·Dv + b·(D + Dv)) per token.
"""

from __future__ import annotations

from functools import reduce

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention.base import State, check_int


def block_mixed_attention(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    qn: Tensor,
    kn: Tensor,
    *,
    block: int,
    degree: int,
    causal: bool,
    key_padding_mask: Tensor | None,
    offset: float,
    eps: float,
) -> Tensor:
    """Mixed block attention over the whole sequence (see the module docstring).

    Args:
        phi_q, phi_k: ``(B, H, L, F)``, ``(B, H, S, F)`` non-negative features of the far part.
        v: ``(B, H, S, Dv)``.
        qn, kn: ``(B, H, L, D)``, ``(B, H, S, D)`` inputs of the exact near kernel.
        block: b, tokens per block (≥ 1); b ≥ N makes it exact power attention.
        degree: p, the even exponent of the near kernel (≥ 2).
        causal: key j visible to query i only if j ≤ i (requires L == S).
        key_padding_mask: ``(B, S)`` bool, True = real key, or None.
        offset: added to the normaliser (1 for PolySketchFormer).
        eps: added to the normaliser; a query with no visible key and offset + eps = 0 gets 0.

    Returns:
        ``(B, H, L, Dv)`` in the accumulation dtype (float32 at least).
    """
    _check_block_degree(block, degree)
    _check_shapes(phi_q, phi_k, v, qn, kn)
    l_q, s = phi_q.shape[2], phi_k.shape[2]
    if causal and l_q != s:
        raise ValueError(f"causal block attention needs L == S, got L={l_q} and S={s}")
    acc = _accumulation_dtype(phi_q, phi_k, v, qn, kn)
    phi_q, phi_k, v, qn, kn = (t.to(acc) for t in (phi_q, phi_k, v, qn, kn))
    if key_padding_mask is not None:
        _check_mask(key_padding_mask, phi_k)
        padded = ~key_padding_mask[:, None, :, None]  # (B, 1, S, 1)
        phi_k, v, kn = (t.masked_fill(padded, 0.0) for t in (phi_k, v, kn))
    ve = _with_ones(v)  # (B, H, S, Dv + 1)
    if causal:
        both = _causal(phi_q, phi_k, ve, qn, kn, block, degree)
    else:
        both = _non_causal(phi_q, phi_k, ve, qn, kn, block, degree)
    return _normalise(both, offset, eps)


def block_mixed_step(
    phi_q: Tensor,
    phi_k: Tensor,
    v: Tensor,
    qn: Tensor,
    kn: Tensor,
    state: State | None,
    *,
    block: int,
    degree: int,
    offset: float,
    eps: float,
) -> tuple[Tensor, State]:
    """One decoding step of the causal form: the output at position t and the next state.

    Args:
        phi_q, phi_k: ``(B, H, 1, F)``; v: ``(B, H, 1, Dv)``; qn, kn: ``(B, H, 1, D)``, all of
            the new token.
        state: None at t = 0, else what the previous step returned. Never modified.
        block, degree, offset, eps: as in ``block_mixed_attention`` (same values every step).

    Returns:
        ``(out: (B, H, 1, Dv), state)`` with out equal to ``block_mixed_attention(causal=True)``
        at this position. The state (all in the accumulation dtype except t)::

            done:    (B, H, F, Dv + 1)  [Σ φ(k)vᵀ, Σ φ(k)] over the completed blocks
            pending: (B, H, F, Dv + 1)  the same sums over the current block's tokens so far
            buf_kn:  (B, H, b, D)       kn of the current block, token t in slot t % b
            buf_v:   (B, H, b, Dv)      v likewise
            t:       () int64           tokens seen before the new one, on the inputs' device

    The current block's φ(k) is summed into ``pending`` as it arrives instead of being buffered:
    a buffer of φ(k) would cost an O(b·F) copy per step (the state is never written in place)
    and an O(b·F·Dv) fold at each boundary. Here every step costs the same, O(F·Dv + b·(D+Dv)),
    and the fold at a boundary (``done + pending``) is selected by ``torch.where`` on t, so t is
    never read on the host: no device sync per token.
    """
    _check_block_degree(block, degree)
    _check_shapes(phi_q, phi_k, v, qn, kn)
    if any(t.shape[2] != 1 for t in (phi_q, phi_k, v, qn, kn)):
        lengths = [t.shape[2] for t in (phi_q, phi_k, v, qn, kn)]
        raise ValueError(f"a step takes one token: all lengths must be 1, got {lengths}")
    acc = _accumulation_dtype(phi_q, phi_k, v, qn, kn)
    phi_q, phi_k, v, qn, kn = (t.to(acc) for t in (phi_q, phi_k, v, qn, kn))
    ve = _with_ones(v)  # (B, H, 1, Dv + 1)
    if state is None:
        state = _empty_state(phi_k, v, kn, block)
    done, pending, buf_kn, buf_v, t = _checked_state(state, phi_k, v, kn, block)

    slot = t % block
    boundary = (t > 0) & (slot == 0)  # the previous token completed a block: fold it
    done = torch.where(boundary, done + pending, done)
    new_kv = phi_k.transpose(-1, -2) @ ve  # (B, H, F, Dv + 1)
    pending = torch.where(boundary, new_kv, pending + new_kv)

    slots = torch.arange(block, device=t.device)
    here = (slots == slot)[:, None]  # (b, 1)
    buf_kn = torch.where(here, kn, buf_kn)  # out of place: the caller's state stays intact
    buf_v = torch.where(here, v, buf_v)

    # Slots after t hold the previous block's tokens (or zeros): masked out by the where.
    near = torch.where(slots <= slot, (qn @ buf_kn.transpose(-1, -2)) ** degree, 0.0)  # (B,H,1,b)
    both = phi_q @ done + torch.cat([near @ buf_v, near.sum(-1, keepdim=True)], dim=-1)
    return _normalise(both, offset, eps), (done, pending, buf_kn, buf_v, t + 1)


# ---------------------------------------------------------------------------------- forms


def _causal(
    phi_q: Tensor, phi_k: Tensor, ve: Tensor, qn: Tensor, kn: Tensor, b: int, p: int
) -> Tensor:
    """``(B, H, N, Dv + 1)``: [numerator, normaliser] of the causal form."""
    n = phi_q.shape[2]
    nb = -(-n // b)
    pq, pk, e, q, k = (_blocks(t, b, nb) for t in (phi_q, phi_k, ve, qn, kn))
    kv = pk.transpose(-1, -2) @ e  # (B, H, nb, F, Dv + 1)
    # Exclusive prefix by shifting the inclusive one (not by subtracting KV_c from it): block c
    # never sees a term of its own or a later block, not even as rounding error.
    prefix = F.pad(kv.cumsum(dim=2)[:, :, :-1], (0, 0, 0, 0, 1, 0))
    future = ~torch.ones(b, b, dtype=torch.bool, device=q.device).tril()
    near = ((q @ k.transpose(-1, -2)) ** p).masked_fill(future, 0.0)  # (B, H, nb, b, b)
    both = pq @ prefix + near @ e  # (B, H, nb, b, Dv + 1)
    return both.flatten(2, 3)[:, :, :n]


def _non_causal(
    phi_q: Tensor, phi_k: Tensor, ve: Tensor, qn: Tensor, kn: Tensor, b: int, p: int
) -> Tensor:
    """``(B, H, L, Dv + 1)``: [numerator, normaliser] of the non-causal form (L, S any)."""
    l_q, s = phi_q.shape[2], phi_k.shape[2]
    nq, nk = -(-l_q // b), -(-s // b)
    m = min(nq, nk)  # blocks that have both queries and keys; only those have a near part
    total = phi_k.transpose(-1, -2) @ ve  # (B, H, F, Dv + 1), on the unblocked keys
    pk, e, k = (_blocks(t, b, m) for t in (phi_k, ve, kn))
    pq, q = _blocks(phi_q, b, nq), _blocks(qn, b, m)
    own = F.pad(pk.transpose(-1, -2) @ e, (0, 0, 0, 0, 0, nq - m))  # (B, H, nq, F, Dv + 1)
    near = (q @ k.transpose(-1, -2)) ** p @ e  # (B, H, m, b, Dv + 1)
    both = pq @ (total.unsqueeze(2) - own) + F.pad(near, (0, 0, 0, 0, 0, nq - m))
    return both.flatten(2, 3)[:, :, :l_q]


# -------------------------------------------------------------------------------- helpers


def _blocks(x: Tensor, b: int, nb: int) -> Tensor:
    """The first ``nb·b`` positions of ``x: (B, H, N, ·)`` as ``(B, H, nb, b, ·)``, zero-padded
    past N (zero keys add nothing; padded query rows are dropped by the caller)."""
    x = x[:, :, : nb * b]
    x = F.pad(x, (0, 0, 0, nb * b - x.shape[2]))
    return x.reshape(x.shape[0], x.shape[1], nb, b, x.shape[-1])


def _with_ones(v: Tensor) -> Tensor:
    """``[v, 1]``: the ones column makes the normaliser one more output column of each matmul."""
    return torch.cat([v, v.new_ones(*v.shape[:-1], 1)], dim=-1)


def _normalise(both: Tensor, offset: float, eps: float) -> Tensor:
    den = both[..., -1:] + (offset + eps)
    # A query that sees no key with offset + eps = 0 has 0/0: give 0, never NaN.
    den = den.masked_fill(den == 0, 1.0)
    return both[..., :-1] / den


def _accumulation_dtype(*tensors: Tensor) -> torch.dtype:
    """The common dtype of the inputs, float32 at least (fp64 stays fp64)."""
    return reduce(torch.promote_types, (t.dtype for t in tensors), torch.float32)


def _empty_state(phi_k: Tensor, v: Tensor, kn: Tensor, b: int) -> State:
    bsz, h, _, f = phi_k.shape
    sums = phi_k.new_zeros(bsz, h, f, v.shape[-1] + 1)
    t = torch.zeros((), dtype=torch.int64, device=phi_k.device)
    return sums, sums, kn.new_zeros(bsz, h, b, kn.shape[-1]), v.new_zeros(bsz, h, b, v.shape[-1]), t


def _checked_state(state: State, phi_k: Tensor, v: Tensor, kn: Tensor, b: int) -> State:
    if len(state) != 5:
        raise ValueError(
            "a block_mixed_step state is (done, pending, buf_kn, buf_v, t), "
            f"got a tuple of {len(state)} tensors"
        )
    bsz, h, _, f = phi_k.shape
    expected = {
        "done": (bsz, h, f, v.shape[-1] + 1),
        "pending": (bsz, h, f, v.shape[-1] + 1),
        "buf_kn": (bsz, h, b, kn.shape[-1]),
        "buf_v": (bsz, h, b, v.shape[-1]),
        "t": (),
    }
    for (name, shape), tensor in zip(expected.items(), state):
        if tuple(tensor.shape) != shape:
            raise ValueError(
                f"state {name} has shape {tuple(tensor.shape)}, expected {shape} for these "
                f"inputs and block={b} (was the state made with another block or shape?)"
            )
    done, pending, buf_kn, buf_v, t = state
    acc = phi_k.dtype
    return done.to(acc), pending.to(acc), buf_kn.to(acc), buf_v.to(acc), t


def _check_block_degree(block: int, degree: int) -> None:
    check_int("block", block, minimum=1, what="tokens per block")
    if isinstance(degree, bool) or not isinstance(degree, int) or degree < 2 or degree % 2:
        raise ValueError(
            f"degree must be an even int >= 2 (the near kernel (qn·kn)^p must be >= 0), "
            f"got {degree!r}"
        )


def _check_shapes(phi_q: Tensor, phi_k: Tensor, v: Tensor, qn: Tensor, kn: Tensor) -> None:
    named = {"phi_q": phi_q, "phi_k": phi_k, "v": v, "qn": qn, "kn": kn}
    for name, t in named.items():
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D (B, H, N, ·), got shape {tuple(t.shape)}")
    batch_heads = {name: tuple(t.shape[:2]) for name, t in named.items()}
    if len(set(batch_heads.values())) != 1:
        raise ValueError(f"all inputs must share (B, H), got {batch_heads}")
    if phi_q.shape[-1] != phi_k.shape[-1]:
        raise ValueError(
            f"phi_q and phi_k must share the feature size F, got {phi_q.shape[-1]} "
            f"and {phi_k.shape[-1]}"
        )
    if qn.shape[-1] != kn.shape[-1]:
        raise ValueError(
            f"qn and kn must share the head size D, got {qn.shape[-1]} and {kn.shape[-1]}"
        )
    if qn.shape[2] != phi_q.shape[2]:
        raise ValueError(
            f"phi_q and qn must share the query length L, got {phi_q.shape[2]} and {qn.shape[2]}"
        )
    key_lengths = {"phi_k": phi_k.shape[2], "v": v.shape[2], "kn": kn.shape[2]}
    if len(set(key_lengths.values())) != 1:
        raise ValueError(f"phi_k, v and kn must share the key length S, got {key_lengths}")


def _check_mask(mask: Tensor, phi_k: Tensor) -> None:
    expected = (phi_k.shape[0], phi_k.shape[2])
    if mask.dtype != torch.bool or tuple(mask.shape) != expected:
        raise ValueError(
            f"key_padding_mask must be a bool tensor of shape (B, S) = {expected}, "
            f"got {mask.dtype} of shape {tuple(mask.shape)}"
        )
