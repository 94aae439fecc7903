"""``pool`` (PoolFormer's token mixer) against ``naive_pool``, a float64 loop over each window."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_pool

B, H, D, DV = 2, 3, 4, 5
F64 = torch.float64


def values(s, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, s, D, generator=g, dtype=dtype)
    k = torch.randn(B, H, s, D, generator=g, dtype=dtype)
    v = torch.randn(B, H, s, DV, generator=g, dtype=dtype)
    return q, k, v


def mask(s):
    m = torch.ones(B, s, dtype=torch.bool)
    m[0, -3:] = False
    m[1, 4] = False
    return m


@pytest.mark.parametrize("pool_size", [1, 3, 5])
@pytest.mark.parametrize("subtract_input", [True, False])
@pytest.mark.parametrize("padded", [False, True], ids=["dense", "padded"])
@pytest.mark.parametrize("grid", [(4, 5), None], ids=["grid", "sequence"])
def test_matches_the_window_loop(grid, padded, subtract_input, pool_size):
    s = 20
    attn = build_attention("pool", head_dim=D, pool_size=pool_size, subtract_input=subtract_input)
    q, k, v = values(s)
    v.requires_grad_(True)
    key_padding_mask = mask(s) if padded else None
    out = attn(q, k, v, key_padding_mask=key_padding_mask, grid=grid)
    ref = naive_pool(
        v,
        grid=grid,
        pool_size=pool_size,
        subtract_input=subtract_input,
        key_padding_mask=key_padding_mask,
    )
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    cot = torch.randn_like(out)
    (grad,) = torch.autograd.grad((out * cot).sum(), v)
    (ref_grad,) = torch.autograd.grad((ref * cot).sum(), v)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-12, atol=1e-12)


def test_is_poolformer_token_mixer_on_the_feature_map():
    # PoolFormer: nn.AvgPool2d(k, 1, k // 2, count_include_pad=False)(x) − x on (B, C, h, w).
    rows, cols = 3, 4
    attn = build_attention("pool", head_dim=D)
    q, k, v = values(rows * cols, seed=1)
    image = v.permute(0, 1, 3, 2).reshape(B, H * DV, rows, cols)
    want = F.avg_pool2d(image, 3, stride=1, padding=1, count_include_pad=False) - image
    want = want.reshape(B, H, DV, rows * cols).transpose(-1, -2)
    torch.testing.assert_close(attn(q, k, v, grid=(rows, cols)), want)
    # The grid is per call, nothing is kept: without it the window is 1-D over the raster order.
    sequence = F.avg_pool1d(
        v.permute(0, 1, 3, 2).reshape(B, H * DV, rows * cols), 3, 1, 1, count_include_pad=False
    ).reshape(B, H, DV, rows * cols)
    torch.testing.assert_close(attn(q, k, v), sequence.transpose(-1, -2) - v)
    assert not torch.allclose(attn(q, k, v), want)


def test_ignores_q_and_k_and_has_no_parameters():
    attn = build_attention("pool", head_dim=D)
    q, k, v = values(6, seed=2)
    out = attn(q, k, v)
    assert torch.equal(attn(torch.randn_like(q), torch.randn_like(k), v), out)
    assert sum(p.numel() for p in attn.parameters()) == 0
    assert not attn.supports_causal and not attn.supports_recurrence
    assert not attn.supports_cross_attention and attn.positional
    assert "pool_size=3" in repr(attn)


def test_low_precision_computes_in_float32():
    attn = build_attention("pool", head_dim=D)
    q, k, v = values(7, seed=3, dtype=torch.float32)
    out = attn(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), attn(q, k, v), rtol=2e-2, atol=2e-2)


def test_errors_name_the_bad_value():
    attn = build_attention("pool", head_dim=D)
    q, k, v = values(6)
    with pytest.raises(ValueError, match="needs L == S, got L=4, S=6"):
        attn(q[:, :, :4], k, v)
    with pytest.raises(ValueError, match=r"'pool': grid \(2, 4\) has 8 cells but .* S=6"):
        attn(q, k, v, grid=(2, 4))
    for bad in [(6,), (2, 3, 1), (2.0, 3), (True, 6), (-2, -3), 6]:
        with pytest.raises(ValueError, match="grid must be \\(rows, cols\\), two positive ints"):
            attn(q, k, v, grid=bad)
    with pytest.raises(NotImplementedError, match="'pool' does not support causal"):
        attn(q, k, v, causal=True)
    for bad, message in [
        (4, "pool_size must be odd"),
        (0, "pool_size must be an odd int >= 1, got 0"),
        (True, "pool_size must be an odd int >= 1, got True"),
        (2.0, "pool_size must be an odd int >= 1, got 2.0"),
    ]:
        with pytest.raises(ValueError, match=message):
            build_attention("pool", head_dim=D, pool_size=bad)
