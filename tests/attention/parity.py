"""Shared float64 parity helpers for the polynomial and polysketch tests: inputs, masks, cases,
parity of outputs and gradients, and of ``step`` with the causal forward."""

from __future__ import annotations

import torch

B, H, D, DV = 2, 2, 8, 3
F64 = torch.float64

CASES = {  # name -> (l_q, s, causal, padded)
    "noncausal": (5, 7, False, False),
    "causal": (8, 8, True, False),
    "padded": (5, 7, False, True),
    "causal-padded": (8, 8, True, True),
}


def qkv(l_q: int, s: int, *, seed: int = 0, dtype: torch.dtype = F64, scale: float = 1.0):
    """q, k ~ N(0, scale²), v ~ N(0, 1): ``(B, H, L|S, D|DV)`` from a seeded generator."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, l_q, D, generator=g, dtype=dtype) * scale
    k = torch.randn(B, H, s, D, generator=g, dtype=dtype) * scale
    v = torch.randn(B, H, s, DV, generator=g, dtype=dtype)
    return q, k, v


def padding_mask(s: int) -> torch.Tensor:
    """``(B, S)``: batch 0 loses its last 3 keys, batch 1 its key 1."""
    mask = torch.ones(B, s, dtype=torch.bool)
    mask[0, s - 3 :] = False
    mask[1, 1] = False
    return mask


def assert_parity(fast, naive, inputs, params=()):
    """Outputs and gradients (a random cotangent) of ``fast`` and ``naive`` agree in float64."""
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    ref_leaves = [t.clone().requires_grad_(True) for t in inputs]
    out = fast(*leaves)
    ref = naive(*ref_leaves)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=F64)
    param_grads = torch.autograd.grad(out, [*leaves, *params], cotangent)
    ref_grads = torch.autograd.grad(ref, [*ref_leaves, *params], cotangent)
    for got, want in zip(param_grads, ref_grads):
        assert want.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)


def assert_steps_match_causal_forward(attn, n: int = 3, *, seed: int = 10):
    """``step`` token by token equals ``forward(causal=True)`` (float64); returns the last state."""
    q, k, v = qkv(n, n, seed=seed)
    full = attn(q, k, v, causal=True)
    state = None
    for t in range(n):
        out, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
        torch.testing.assert_close(out, full[:, :, t : t + 1], rtol=1e-10, atol=1e-12)
    return state
