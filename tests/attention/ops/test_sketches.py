"""``symmetric_square``: the compressed s ⊗ s keeps the inner product of the full Kronecker;
the learned sketch's level in chunks against the whole level (outputs equal, gradients, gradcheck).
"""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops import sketches
from attn_lightning.attention.ops.sketches import (
    LearnedPolySketch,
    chunked_sketch_level,
    sketch_level,
    symmetric_square,
)

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


# ---------------------------------------------------------------------- chunked learned level
def level_params(in_dim: int, r: int, *, bias: bool, dtype: torch.dtype = F64, seed: int = 0):
    """Random (LN weight, LN bias, fc1 weight, fc1 bias, fc2 weight, fc2 bias) of one level."""
    g = torch.Generator().manual_seed(seed)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=dtype)

    hidden = 8 * r
    return (
        1 + 0.3 * randn(in_dim),
        0.2 * randn(in_dim),
        randn(hidden, in_dim) / in_dim**0.5,
        0.1 * randn(hidden) if bias else None,
        randn(r, hidden) / hidden**0.5,
        0.1 * randn(r) if bias else None,
    )


def leaves(params):
    return tuple(None if p is None else p.clone().requires_grad_(True) for p in params)


# 300 rows in all: 7, 64 and 128 do not divide it (chunks of 6-7, 60 and 100 rows)
@pytest.mark.parametrize("rows", [4, 7, 64, 128, 300, 512])
@pytest.mark.parametrize("bias", [False, True])
def test_chunked_level_forward_equals_the_whole_level(rows, bias):
    params = level_params(6, 3, bias=bias, dtype=torch.float32)
    x = torch.randn(2, 3, 50, 6, generator=torch.Generator().manual_seed(1))
    whole = sketch_level(x, params, 1e-5)
    chunked = chunked_sketch_level(x, params, 1e-5, rows=rows)
    assert chunked.shape == (2, 3, 50, 3)
    # Each row's arithmetic is the same, but a BLAS may block (and so round) a GEMM differently
    # with the row count and the thread count: equal to float32 rounding, not bit for bit.
    torch.testing.assert_close(chunked, whole, rtol=1e-5, atol=1e-6)  # O(1) values


@pytest.mark.parametrize("rows", [1, 3])
def test_chunks_of_a_few_rows_agree_to_rounding(rows):
    # A BLAS multiplies 1-3 rows with another kernel (gemv-like), rounding differently.
    params = level_params(6, 3, bias=True, dtype=torch.float32)
    x = torch.randn(2, 3, 5, 6, generator=torch.Generator().manual_seed(1))
    chunked = chunked_sketch_level(x, params, 1e-5, rows=rows)
    torch.testing.assert_close(chunked, sketch_level(x, params, 1e-5), rtol=1e-6, atol=1e-6)


def test_chunks_are_near_equal_and_cover_every_row():
    sizes = [c.stop - c.start for c in sketches._chunks(300, 128)]
    assert sizes == [100, 100, 100]  # not 128, 128, 44
    assert [c.stop - c.start for c in sketches._chunks(10, 4)] == [3, 3, 4]
    assert sketches._chunks(0, 4) == [] and sketches._chunks(5, 8) == [slice(0, 5)]


@pytest.mark.parametrize(("dtype", "tol"), [(F64, 1e-12), (torch.float32, 2e-5)])
@pytest.mark.parametrize("bias", [False, True])
def test_chunked_level_gradients_match_the_whole_level(dtype, tol, bias):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(3, 2, 13, 5, generator=g, dtype=dtype)  # 78 rows, chunks of 10
    cotangent = torch.randn(3, 2, 13, 4, generator=g, dtype=dtype)
    params = level_params(5, 4, bias=bias, dtype=dtype)
    grads = {}
    for form, level in {
        "whole": lambda x, p: sketch_level(x, p, 1e-5),
        "chunked": lambda x, p: chunked_sketch_level(x, p, 1e-5, rows=10),
    }.items():
        xs, ps = x.clone().requires_grad_(True), leaves(params)
        wrt = [xs, *(p for p in ps if p is not None)]
        grads[form] = torch.autograd.grad(level(xs, ps), wrt, cotangent)
    assert len(grads["chunked"]) == (7 if bias else 5)
    for got, want in zip(grads["chunked"], grads["whole"]):
        torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_chunked_level_passes_gradcheck_with_a_ragged_last_chunk():
    x = torch.randn(1, 1, 7, 3, generator=torch.Generator().manual_seed(3), dtype=F64)
    params = leaves(level_params(3, 1, bias=True, seed=4))  # hidden 8, r 1; chunks 3, 3, 1
    assert torch.autograd.gradcheck(
        lambda x, *p: chunked_sketch_level(x, p, 1e-5, rows=3),
        (x.requires_grad_(True), *params),
    )


def test_chunked_level_gives_only_the_gradients_asked_for():
    params = level_params(4, 2, bias=True)
    x = torch.randn(2, 9, 4, dtype=F64, requires_grad=True)  # the parameters need none
    (dx,) = torch.autograd.grad(chunked_sketch_level(x, params, 1e-5, rows=4).sum(), [x])
    (want,) = torch.autograd.grad(sketch_level(x, params, 1e-5).sum(), [x])
    torch.testing.assert_close(dx, want, rtol=1e-12, atol=1e-12)
    weight = params[2].clone().requires_grad_(True)  # and now x needs none
    mixed = (*params[:2], weight, *params[3:])
    (dw,) = torch.autograd.grad(
        chunked_sketch_level(x.detach(), mixed, 1e-5, rows=4).sum(), [weight]
    )
    (want_w,) = torch.autograd.grad(sketch_level(x.detach(), mixed, 1e-5).sum(), [weight])
    torch.testing.assert_close(dw, want_w, rtol=1e-12, atol=1e-12)


def test_chunk_rows_must_be_positive():
    with pytest.raises(ValueError, match=r"rows must be an int >= 1 .*got 0"):
        chunked_sketch_level(torch.randn(2, 4), level_params(4, 2, bias=False), 1e-5, rows=0)


def test_learned_sketch_saves_no_hidden_activation_on_cpu(monkeypatch):
    monkeypatch.setattr(sketches, "CHUNK_ELEMENTS", 8 * 4 * 32)  # 32 rows a chunk, 200 rows
    sketch = LearnedPolySketch(head_dim=8, sketch_size=4)
    x = torch.randn(2, 2, 50, 8, requires_grad=True)
    saved: list[int] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = sketch(x)  # (2, 2, 50, 4), through a (200, 32) hidden layer per level
    assert max(saved) < 200 * 32  # x and the (200, 4) outputs are kept, no (200, 32) hidden
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
