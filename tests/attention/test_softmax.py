"""Softmax (SDPA) against ``naive_softmax``; KV-cache step; mean pooling against ``naive_mean``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_mean, naive_softmax


def make_inputs(l_q, s, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(2, 3, n, d, generator=g, dtype=torch.float64, requires_grad=True)
        for n, d in ((l_q, 8), (s, 8), (s, 5))
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("scale", [None, 0.3])
def test_outputs_and_gradients_match_explicit_softmax(causal, masked, scale):
    n = 9
    q, k, v = make_inputs(n, n if causal else n + 2)
    mask = None
    if masked:
        mask = torch.ones(2, k.shape[2], dtype=torch.bool)
        mask[0, 2] = mask[1, -3:] = False
    attn = build_attention("softmax", head_dim=8, scale=scale)
    out = attn(q, k, v, causal=causal, key_padding_mask=mask)
    ref = naive_softmax(q, k, v, causal=causal, key_padding_mask=mask, scale=scale)
    torch.testing.assert_close(out, ref)
    w = torch.randn_like(out)
    for got, want in zip(
        torch.autograd.grad((out * w).sum(), (q, k, v)),
        torch.autograd.grad((ref * w).sum(), (q, k, v)),
    ):
        torch.testing.assert_close(got, want)


def test_kv_cache_grows_with_context():
    attn = build_attention("softmax", head_dim=8)
    q, k, v = (t.detach() for t in make_inputs(4, 4))
    state = None
    for t in range(4):
        _, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
    assert state[0].shape == (2, 3, 4, 8) and state[1].shape == (2, 3, 4, 5)


def test_bad_scale_is_rejected():
    with pytest.raises(ValueError, match="scale"):
        build_attention("softmax", head_dim=8, scale=-1.0)


@pytest.mark.parametrize("causal", [False, True])
def test_mean_attention_is_the_average_of_visible_values(causal):
    q, k, v = (t.detach() for t in make_inputs(6, 6))
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False
    out = build_attention("mean", head_dim=8, eps=0.0)(
        q, k, v, causal=causal, key_padding_mask=mask
    )
    ref = naive_mean(q, k, v, causal=causal, key_padding_mask=mask)
    torch.testing.assert_close(out, ref)


def test_naive_softmax_matches_sdpa_and_causal_mask():
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64) for _ in range(3))
    for causal in (False, True):
        expected = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.testing.assert_close(naive_softmax(q, k, v, causal=causal), expected)


def test_naive_references_give_zeros_for_a_query_that_sees_no_key():
    q, k, v = (t.detach() for t in make_inputs(3, 4))
    mask = torch.ones(2, 4, dtype=torch.bool)
    mask[1] = False
    for naive in (naive_softmax, naive_mean):
        out = naive(q, k, v, key_padding_mask=mask)
        assert torch.isfinite(out).all() and (out[1] == 0).all()
