"""The shared feature-map kernels: chunking changes nothing, the non-causal product's backward."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.naive import LINEAR_FEATURE_MAPS
from attn_lightning.attention.ops.linear_kernels import (
    causal_linear_attention,
    linear_attention,
    product_dtype,
)


def inputs(l_q, s, d=6, dv=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = lambda n, dd: (2, 3, n, dd)  # noqa: E731
    q = torch.randn(shape(l_q, d), generator=g, dtype=torch.float64)
    k = torch.randn(shape(s, d), generator=g, dtype=torch.float64)
    v = torch.randn(shape(s, dv), generator=g, dtype=torch.float64)
    return q, k, v


def test_chunked_causal_equals_single_chunk():
    q, k, v = (t.detach() for t in inputs(50, 50))
    phi = LINEAR_FEATURE_MAPS["elu"]
    a = causal_linear_attention(phi(q), phi(k), v, chunk_size=7)
    b = causal_linear_attention(phi(q), phi(k), v, chunk_size=50)
    torch.testing.assert_close(a, b)


@pytest.mark.parametrize("shift", [1e-3, 1.0])
def test_noncausal_linear_product_gradcheck(shift):
    # L ≠ S, and one key zeroed as padding would be.
    g = torch.Generator().manual_seed(4)
    phi_q = torch.rand(1, 2, 5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    phi_k = torch.rand(1, 2, 7, 3, generator=g, dtype=torch.float64)
    phi_k[:, :, 2] = 0.0
    phi_k.requires_grad_(True)
    v = torch.randn(1, 2, 7, 4, generator=g, dtype=torch.float64, requires_grad=True)
    out = linear_attention(phi_q, phi_k, v, offset=shift, eps=0.0)
    sim = phi_q @ phi_k.transpose(-1, -2)
    torch.testing.assert_close(out, sim @ v / (shift + sim.sum(-1, keepdim=True)))
    assert torch.autograd.gradcheck(
        lambda a, b, c: linear_attention(a, b, c, offset=shift, eps=0.0),
        (phi_q, phi_k, v),
        eps=1e-6,
        atol=1e-8,
    )


@pytest.mark.parametrize(
    "dtype,expected",
    [
        (torch.bfloat16, torch.bfloat16),  # bf16 GEMMs (tensor cores), float32 sums
        (torch.float16, torch.float32),  # fp16's range: the normaliser outgrows 65,504
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
def test_product_dtype(dtype, expected):
    assert product_dtype(dtype) == expected


def test_fp16_causal_runs_on_float32_products():
    # A normaliser of 147,456 (2,048 keys, q·k = 72 each): fp16 products would overflow to inf.
    phi = torch.full((1, 1, 2048, 8), 3.0, dtype=torch.float16)
    v = torch.ones(1, 1, 2048, 2, dtype=torch.float16)
    out = causal_linear_attention(phi, phi, v, chunk_size=64)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, torch.ones_like(out))
