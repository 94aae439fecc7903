"""The chunked causal product and its hand-written backward against the masked matmul."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention.ops.causal_product import causal_product, normalised_causal_product


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
