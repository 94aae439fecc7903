"""The tiled exact power attention against the formula written out in float64."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops import power_exact
from attn_lightning.attention.ops.power_exact import exact_power_attention


def formula(q, k, v, blocked, p, c):
    sim = (q @ k.transpose(-1, -2)).pow(p)
    if blocked is not None:
        sim = sim.masked_fill(blocked, 0.0)
    return sim @ v / (c + sim.sum(-1, keepdim=True))


@pytest.mark.parametrize("tile_elements", [1, 60, 1 << 20])  # one head per tile ... all at once
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "both"])
@pytest.mark.parametrize("p", [2, 4])
@pytest.mark.parametrize("query_block", [2, 128])  # causal: 4 blocks of 2 rows, 1 block
def test_matches_formula_with_gradients(monkeypatch, tile_elements, mask, p, query_block):
    if query_block == 128 and mask in ("none", "padding"):
        pytest.skip("the query block acts on causal calls only")
    monkeypatch.setattr(power_exact, "TILE_ELEMENTS", tile_elements)
    monkeypatch.setattr(power_exact, "QUERY_BLOCK", query_block)
    g = torch.Generator().manual_seed(p)
    b, h, n, d = 2, 3, 7, 4
    q, k = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) * 0.7 for _ in range(2))
    v = torch.randn(b, h, n, 2, generator=g, dtype=torch.float64)
    blocked = None
    if mask in ("causal", "both"):
        blocked = torch.ones(n, n, dtype=torch.bool).triu(1)
    if mask in ("padding", "both"):
        pad = torch.zeros(b, 1, 1, n, dtype=torch.bool)
        pad[1, ..., -2:] = True
        blocked = pad if blocked is None else pad | blocked
    causal = mask in ("causal", "both")
    inputs = tuple(t.requires_grad_(True) for t in (q, k, v))

    def fn(a, bb, cc):
        return exact_power_attention(
            a, bb, cc, blocked=blocked, causal=causal, degree=p, offset=1.0
        )

    torch.testing.assert_close(fn(*inputs), formula(*inputs, blocked, p, 1.0))
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-8)


def test_every_key_blocked_gives_zeros_not_nan():
    q, k, v = (torch.randn(1, 1, 3, 2, dtype=torch.float64, requires_grad=True) for _ in range(3))
    blocked = torch.ones(1, 1, 1, 3, dtype=torch.bool)
    out = exact_power_attention(q, k, v, blocked=blocked, causal=False, degree=4, offset=0.0)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def polynomial_formula(q, k, v, coefficients, blocked, c):
    d = q @ k.transpose(-1, -2)
    sim = sum(a * d**i for i, a in enumerate(coefficients)).clamp_min(0.0)
    if blocked is not None:
        sim = sim.masked_fill(blocked, 0.0)
    return sim @ v / (c + sim.sum(-1, keepdim=True))


@pytest.mark.parametrize("tile_elements", [1, 60, 1 << 20])
@pytest.mark.parametrize("mask", ["none", "both"])
@pytest.mark.parametrize("signed", [False, True], ids=["positive", "clamped"])
@pytest.mark.parametrize("query_block", [2, 128])
def test_learned_polynomial_matches_formula_with_gradients(
    monkeypatch, tile_elements, mask, signed, query_block
):
    """The learned polynomial's tiled form, the coefficients' gradient included; ``signed`` makes
    the polynomial negative on part of the scores, so the clamp (and its zero gradient) acts."""
    monkeypatch.setattr(power_exact, "TILE_ELEMENTS", tile_elements)
    monkeypatch.setattr(power_exact, "QUERY_BLOCK", query_block)
    g = torch.Generator().manual_seed(7)
    b, h, n, d = 2, 2, 6, 3
    q, k = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(b, h, n, 2, generator=g, dtype=torch.float64)
    a = torch.tensor([0.02, 1.5, 0.01, 0.3, 0.01] if signed else [1.0, 1.0, 0.5, 1 / 6, 1 / 24])
    blocked = None
    if mask == "both":
        pad = torch.zeros(b, 1, 1, n, dtype=torch.bool)
        pad[1, ..., -2:] = True
        blocked = pad | torch.ones(n, n, dtype=torch.bool).triu(1)
    inputs = tuple(t.requires_grad_(True) for t in (q, k, v, a.double()))
    dots = q @ k.transpose(-1, -2)
    poly = sum(c * dots**i for i, c in enumerate(inputs[3].detach()))
    assert (poly < 0).any() == signed

    def fn(qq, kk, vv, aa):
        return exact_power_attention(
            qq,
            kk,
            vv,
            blocked=blocked,
            causal=mask == "both",
            degree=4,
            offset=1e-6,
            coefficients=aa,
        )

    torch.testing.assert_close(fn(*inputs), polynomial_formula(*inputs, blocked, 1e-6))
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7)
