"""The tiled learned even polynomial against its formula written out in float64."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops import power_exact
from attn_lightning.attention.ops.even_polynomial import even_polynomial_attention


def formula(qn, kn, v, a, sketches, blocked, c):
    sim = a[0] + a[1] * (qn @ kn.transpose(-1, -2)) ** 2
    if sketches is not None:
        sq, sk = sketches
        sim = sim + a[2] * (sq @ sk.transpose(-1, -2)) ** 2
    if blocked is not None:
        sim = sim.masked_fill(blocked, 0.0)
    return sim @ v / (c + sim.sum(-1, keepdim=True))


@pytest.mark.parametrize("tile_elements", [1, 60, 1 << 20])  # one head per tile ... all at once
@pytest.mark.parametrize("mask", ["none", "causal", "padding", "both"])
@pytest.mark.parametrize("degree", [2, 4])
def test_matches_formula_with_gradients(monkeypatch, tile_elements, mask, degree):
    monkeypatch.setattr(power_exact, "TILE_ELEMENTS", tile_elements)
    # Causal: blocks of 2 query rows (4, the last short); a key block per query block.
    monkeypatch.setattr(power_exact, "QUERY_BLOCK", 2)
    g = torch.Generator().manual_seed(degree)
    b, h, n, d, r = 2, 2, 7, 3, 4

    def draw(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64)

    qn, kn, v = draw(b, h, n, d), draw(b, h, n, d), draw(b, h, n, 2)
    sq, sk = draw(b, h, n, r), draw(b, h, n, r)
    a = torch.tensor([0.3, 0.8, 0.5][: degree // 2 + 1], dtype=torch.float64)
    blocked = None
    if mask in ("causal", "both"):
        blocked = torch.ones(n, n, dtype=torch.bool).triu(1)
    if mask in ("padding", "both"):
        pad = torch.zeros(b, 1, 1, n, dtype=torch.bool)
        pad[1, ..., -3:] = True
        blocked = pad if blocked is None else pad | blocked
    causal = mask in ("causal", "both")
    inputs = [t.requires_grad_(True) for t in (qn, kn, v, a, sq, sk)]

    def fn(q_, k_, v_, a_, sq_, sk_):
        sketches = (sq_, sk_) if degree == 4 else None
        return even_polynomial_attention(
            q_, k_, v_, a_, sketches, blocked=blocked, causal=causal, offset=1e-3
        )

    want = formula(qn, kn, v, a, (sq, sk) if degree == 4 else None, blocked, 1e-3)
    torch.testing.assert_close(fn(*inputs), want)
    used = inputs if degree == 4 else inputs[:4]
    assert torch.autograd.gradcheck(lambda *x: fn(*x, *inputs[len(x) :]), used, atol=1e-8)


def test_every_key_blocked_gives_zeros_not_nan():
    qn, kn, v = (torch.randn(1, 1, 3, 2, dtype=torch.float64, requires_grad=True) for _ in range(3))
    a = torch.tensor([0.0, 1.0], dtype=torch.float64, requires_grad=True)
    blocked = torch.ones(1, 1, 1, 3, dtype=torch.bool)
    out = even_polynomial_attention(qn, kn, v, a, None, blocked=blocked, causal=False, offset=0.0)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (qn, kn, v, a))
