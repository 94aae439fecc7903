"""The chunked causal product and its hand-written backward against the masked matmul; bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention.ops.causal_product import causal_product, normalised_causal_product
from attn_lightning.attention.ops.centred_product import CentredProduct, centred_forward


# tile_tokens: 4 → one head, one chunk per tile (state carried between every chunk);
# 8 → two chunks per tile; 40 → several whole heads per tile; the default → everything at once.
@pytest.mark.parametrize("tile_tokens", [4, 8, 40, 4096])
@pytest.mark.parametrize("n,chunk", [(1, 1), (7, 7), (16, 4), (33, 8)])
def test_causal_product_matches_masked_matmul(n, chunk, tile_tokens):
    g = torch.Generator().manual_seed(n)
    q, k, v = (
        torch.randn(2, 2, n, 3, generator=g, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    pad = (-n) % chunk
    padded = [F.pad(t, (0, 0, 0, pad)) for t in (q, k, v)]
    out = causal_product(*padded, chunk, tile_tokens=tile_tokens)[:, :, :n]
    ref = ((q @ k.transpose(-1, -2)).tril()) @ v
    torch.testing.assert_close(out, ref)
    # The full Jacobian at n ≤ 8 (every tiling has such a case); above, fast mode compares
    # uᵀJv for random u, v — a wrong backward still fails it, at a tenth of the time (the full
    # Jacobian of n = 33 with 4-token tiles took 18 s on 2 cores).
    assert torch.autograd.gradcheck(
        lambda a, b, c: causal_product(a, b, c, chunk, tile_tokens=tile_tokens),
        tuple(padded),
        eps=1e-6,
        atol=1e-8,
        fast_mode=n > 8,
    )


@pytest.mark.parametrize("tile_tokens", [4, 8, 4096])
@pytest.mark.parametrize("shift", [1e-3, 1.0])
def test_normalised_causal_product_gradcheck(shift, tile_tokens):
    g = torch.Generator().manual_seed(3)
    q, k = (
        torch.rand(1, 2, 12, 3, generator=g, dtype=torch.float64, requires_grad=True)
        for _ in range(2)
    )
    v = torch.randn(1, 2, 12, 4, generator=g, dtype=torch.float64, requires_grad=True)
    out = normalised_causal_product(q, k, v, 4, shift, tile_tokens=tile_tokens)
    sim = (q @ k.transpose(-1, -2)).tril()
    torch.testing.assert_close(out, sim @ v / (shift + sim.sum(-1, keepdim=True)))
    assert torch.autograd.gradcheck(
        lambda a, b, c: normalised_causal_product(a, b, c, 4, shift, tile_tokens=tile_tokens),
        (q, k, v),
        eps=1e-6,
        atol=1e-8,
    )


def test_causal_product_rejects_ragged_length_and_bad_tile():
    x = torch.randn(1, 1, 5, 2)
    with pytest.raises(ValueError, match="multiple of chunk 4"):
        causal_product(x, x, x, 4)
    with pytest.raises(ValueError, match="tile_tokens must be a positive int, got 0"):
        causal_product(x, x, x, 5, tile_tokens=0)


def _bf16_inputs(n, f, e, mean, seed=0):
    """Non-negative q, k (features) and values with a mean, rounded to bf16."""
    g = torch.Generator().manual_seed(seed)
    q = torch.rand(2, 2, n, f, generator=g).bfloat16()
    k = torch.rand(2, 2, n, f, generator=g).bfloat16()
    v = (torch.randn(2, 2, n, e, generator=g) + mean).bfloat16()
    return q, k, v


def _relative(got, want):
    return ((got.double() - want).norm() / want.norm()).item()


# Values of mean 2σ: without centring, the query gradient of the bf16 GEMMs is the difference of
# two large terms rounded at 2^-9 (relative error 0.20 here); centred it is ~1.5e-2.
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.parametrize("tile_tokens", [96, None])  # None: the device's default
@pytest.mark.parametrize("shift", [1e-6, 1.0])
@pytest.mark.parametrize("mean", [0.0, 2.0])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_bf16_normalised_product_matches_float64(tile_tokens, shift, mean, device):
    q, k, v = _bf16_inputs(1024, 16, 8, mean)
    grad = torch.randn(2, 2, 1024, 8, generator=torch.Generator().manual_seed(1)).bfloat16()
    low = [t.clone().to(device).requires_grad_() for t in (q, k, v)]
    out = normalised_causal_product(*low, 32, shift, tile_tokens=tile_tokens)
    out.backward(grad.to(device))
    out, low = out.cpu(), [t.grad.cpu() for t in low]
    ref64 = [t.double().requires_grad_() for t in (q, k, v)]
    sim = (ref64[0] @ ref64[1].transpose(-1, -2)).tril()
    ref = sim @ ref64[2] / (shift + sim.sum(-1, keepdim=True))
    ref.backward(grad.double())
    assert out.dtype == torch.bfloat16 and all(t.dtype == torch.bfloat16 for t in low)
    assert _relative(out, ref) < 1e-2
    for got, want in zip(low, ref64):
        assert _relative(got, want.grad) < 3e-2


@pytest.mark.parametrize("tile_tokens", [8, 4096])
@pytest.mark.parametrize("shift", [1e-3, 1.0])
def test_centred_product_is_exact_in_float64(tile_tokens, shift):
    # Centring is an identity: in float64 the bf16 path's algebra equals the masked matmul.
    g = torch.Generator().manual_seed(5)
    q, k = (torch.rand(1, 2, 16, 3, generator=g, dtype=torch.float64) for _ in range(2))
    v = (torch.randn(1, 2, 16, 4, generator=g, dtype=torch.float64) + 3.0).requires_grad_()
    q.requires_grad_(), k.requires_grad_()
    out = CentredProduct.apply(q, k, v, 4, shift, tile_tokens)
    sim = (q @ k.transpose(-1, -2)).tril()
    torch.testing.assert_close(out, sim @ v / (shift + sim.sum(-1, keepdim=True)))
    assert torch.autograd.gradcheck(
        lambda a, b, c: CentredProduct.apply(a, b, c, 4, shift, tile_tokens),
        (q, k, v),
        eps=1e-6,
        atol=1e-8,
    )


def test_bf16_prefix_states_and_normaliser_are_float32():
    # Every key's features are 1 and chunks are one token: a bf16 running sum would stall at
    # 256 (256 + 1 rounds to 256), so the normaliser and the state must be summed in float32.
    n = 2048
    ones = torch.ones(1, 1, n, 1, dtype=torch.bfloat16)
    v = (torch.arange(n) >= n // 2).to(torch.bfloat16).view(1, 1, n, 1)  # 0, then 1
    out = normalised_causal_product(ones, ones, v, 1, 0.0)
    want = v.double().cumsum(2) / torch.arange(1, n + 1, dtype=torch.float64).view(1, 1, n, 1)
    assert _relative(out, want) < 5e-3
    raw = causal_product(ones, ones, v, 1)
    assert _relative(raw, v.double().cumsum(2)) < 5e-3
    _, (out_c, _, _, den, _) = centred_forward(
        *(t.view(1, n, 1, 1) for t in (ones, ones, v)), 0.0, 64
    )
    assert den.dtype == out_c.dtype == torch.float32


def test_bf16_query_that_sees_no_key_gives_zero():
    q, k, v = _bf16_inputs(8, 3, 2, 2.0)
    k[:, :, :5] = 0  # the first five queries see only zero-feature keys
    out = normalised_causal_product(q, k, v, 4, 0.0)
    assert torch.equal(out[:, :, :5], torch.zeros_like(out[:, :, :5]))
    assert torch.isfinite(out).all()


def test_causal_product_rejects_mixed_dtypes():
    x = torch.randn(1, 1, 4, 2)
    with pytest.raises(ValueError, match="q, k, v must share a dtype"):
        normalised_causal_product(x, x, x.bfloat16(), 4, 1.0)


def test_bf16_large_later_value_leaves_earlier_outputs_bit_identical():
    # The centring references are causal: a large value at t (mid-chunk) cannot move, even by
    # rounding, the outputs before t (a reference through the chunk's end would: ~1e-2 here).
    q, k, v = _bf16_inputs(96, 4, 3, 0.0)
    v2 = v.clone()
    v2[:, :, 40] = 1e4  # chunk 1 of 32-token chunks
    out = normalised_causal_product(q, k, v, 32, 1e-6)
    out2 = normalised_causal_product(q, k, v2, 32, 1e-6)
    assert torch.equal(out[:, :, :40], out2[:, :, :40])
    assert not torch.equal(out[:, :, 40:], out2[:, :, 40:])
