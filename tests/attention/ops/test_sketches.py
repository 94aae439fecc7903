"""``symmetric_square``: the compressed s ⊗ s keeps the inner product of the full Kronecker."""

from __future__ import annotations

import torch

from attn_lightning.attention.ops.sketches import symmetric_square

F64 = torch.float64


def test_symmetric_square_inner_product_equals_full_kronecker():
    g = torch.Generator().manual_seed(6)
    s, t = torch.randn(3, 7, generator=g, dtype=F64), torch.randn(4, 7, generator=g, dtype=F64)
    full_s = (s[:, :, None] * s[:, None, :]).flatten(1)  # (3, 49)
    full_t = (t[:, :, None] * t[:, None, :]).flatten(1)
    compressed = symmetric_square(s) @ symmetric_square(t).T
    assert symmetric_square(s).shape == (3, 28)
    torch.testing.assert_close(compressed, full_s @ full_t.T, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compressed, (s @ t.T) ** 2, rtol=1e-12, atol=1e-12)
