"""Softmax (SDPA) against ``naive_softmax``; KV-cache step; mean pooling against ``naive_mean``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_mean, naive_softmax
from attn_lightning.attention.ops import kv_cache


def make_inputs(l_q, s, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(2, 3, n, d, generator=g, dtype=torch.float64, requires_grad=True)
        for n, d in ((l_q, 8), (s, 8), (s, 5))
    )


def assert_same_with_gradients(out, ref, inputs):
    """Equal outputs, and equal gradients of the inputs for one random cotangent."""
    torch.testing.assert_close(out, ref)
    w = torch.randn_like(out)
    for got, want in zip(
        torch.autograd.grad((out * w).sum(), inputs), torch.autograd.grad((ref * w).sum(), inputs)
    ):
        torch.testing.assert_close(got, want)


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
    assert_same_with_gradients(out, ref, (q, k, v))


def test_kv_cache_grows_with_context():
    attn = build_attention("softmax", head_dim=8)
    q, k, v = (t.detach() for t in make_inputs(4, 4))
    state = None
    for t in range(4):
        _, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
    assert state[0].shape == (2, 3, 4, 8) and state[1].shape == (2, 3, 4, 5)


def step_all(attn, q, k, v, state=None):
    outs = []
    for t in range(q.shape[2]):
        sl = slice(t, t + 1)
        out, state = attn.step(q[:, :, sl], k[:, :, sl], v[:, :, sl], state)
        outs.append(out)
    return torch.cat(outs, dim=2), state


@torch.no_grad()
def test_step_matches_causal_forward_across_cache_growth():
    attn = build_attention("softmax", head_dim=8, cache_size=4)
    q, k, v = make_inputs(11, 11)
    out, state = step_all(attn, q, k, v)  # capacity 4 -> 8 -> 16
    torch.testing.assert_close(out, attn(q, k, v, causal=True), rtol=1e-12, atol=1e-12)
    assert state[0].shape == (2, 3, 11, 8) and state[1].shape == (2, 3, 11, 5)
    assert kv_cache._buffers_of(*state).k.shape == (2, 3, 16, 8)  # preallocated, doubled twice
    torch.testing.assert_close(state[0], k, rtol=0, atol=0)


@torch.no_grad()
def test_a_state_stepped_twice_gives_both_continuations():
    # Several continuations of one prefix (sampling, beams): the contract lets a caller step the
    # same state again; the cache copies rather than overwrite the first continuation's slot.
    attn = build_attention("softmax", head_dim=8, cache_size=16)
    q, k, v = make_inputs(6, 6)
    q2, k2, v2 = make_inputs(6, 6, seed=1)
    _, prefix = step_all(attn, q[:, :, :3], k[:, :, :3], v[:, :, :3])
    first, _ = step_all(attn, q[:, :, 3:], k[:, :, 3:], v[:, :, 3:], prefix)
    second, _ = step_all(attn, q2[:, :, 3:], k2[:, :, 3:], v2[:, :, 3:], prefix)
    again, _ = step_all(attn, q[:, :, 3:], k[:, :, 3:], v[:, :, 3:], prefix)
    torch.testing.assert_close(first, attn(q, k, v, causal=True)[:, :, 3:])
    mixed = [torch.cat([a[:, :, :3], b[:, :, 3:]], dim=2) for a, b in ((q, q2), (k, k2), (v, v2))]
    torch.testing.assert_close(second, attn(*mixed, causal=True)[:, :, 3:])
    torch.testing.assert_close(again, first, rtol=0, atol=0)


@pytest.mark.parametrize("window", [1, 3, 20])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_sliding_window_matches_the_banded_reference(window, causal, masked):
    q, k, v = make_inputs(9, 9)
    mask = None
    if masked:
        mask = torch.ones(2, 9, dtype=torch.bool)
        mask[0, 2] = mask[1, 4:] = False  # batch 1: later queries see no key within the window
    attn = build_attention("softmax", head_dim=8, window=window)
    out = attn(q, k, v, causal=causal, key_padding_mask=mask)
    ref = naive_softmax(q, k, v, causal=causal, key_padding_mask=mask, window=window)
    assert_same_with_gradients(out, ref, (q, k, v))
    if window == 3 and not masked:  # query 8 reads keys 6, 7, 8 (and 9, 10 were there any)
        moved = k.detach().clone()
        moved[:, :, :6] += 100.0
        again = attn(q, moved, v, causal=causal)
        torch.testing.assert_close(again[:, :, 8], out[:, :, 8].detach())


@torch.no_grad()
@pytest.mark.parametrize("window", [1, 4])
def test_window_step_keeps_the_last_w_minus_1_tokens_and_matches_forward(window):
    attn = build_attention("softmax", head_dim=8, window=window)
    q, k, v = make_inputs(11, 11)
    steps, state = step_all(attn, q, k, v)
    torch.testing.assert_close(steps, attn(q, k, v, causal=True))
    assert state[0].shape == (2, 3, window - 1, 8) and state[1].shape == (2, 3, window - 1, 5)
    assert attn.state_size(seq_len=1000, value_dim=5) == (window - 1) * (8 + 5)
    assert attn.state_size(seq_len=2, value_dim=5) == min(2, window - 1) * 13


def test_a_window_is_self_attention_and_a_bad_one_is_named():
    attn = build_attention("softmax", head_dim=8, window=2)
    q, k, v = make_inputs(3, 5)
    with pytest.raises(ValueError, match="self-attention"):
        attn(q, k, v)
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=r"window must be an int >= 1 \(keys within"):
            build_attention("softmax", head_dim=8, window=bad)


def test_bad_cache_size_is_rejected():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="cache_size"):
            build_attention("softmax", head_dim=8, cache_size=bad)
    assert "cache_size=64" in repr(build_attention("softmax", head_dim=8, cache_size=64))


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


# Attention dropout: with v = I (S values of size S) the output is the dropped weight matrix itself,
# so every path (SDPA, masked SDPA, the window's band and its blocks) is checked entry by entry.
DROPOUT_PATHS = {
    "plain": dict(n=9, causal=False, masked=False, window=None),
    "causal": dict(n=9, causal=True, masked=False, window=None),
    "masked": dict(n=9, causal=False, masked=True, window=None),
    "window band": dict(n=9, causal=True, masked=True, window=3),
    "window blocks": dict(n=140, causal=True, masked=True, window=5),  # 2·64 < 140: by blocks
}


@pytest.mark.parametrize("path", DROPOUT_PATHS)
def test_attention_dropout_zeroes_weights_scales_the_rest_and_matches_the_reference(path):
    n, causal, masked, window = (
        DROPOUT_PATHS[path][key] for key in ("n", "causal", "masked", "window")
    )
    p = 0.3
    q, k, _ = make_inputs(n, n)
    v = torch.randn(2, 3, n, n, dtype=torch.float64, requires_grad=True)
    mask = None
    if masked:
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[0, 2] = mask[1, n // 2 :] = False
    options = dict(causal=causal, key_padding_mask=mask)
    attn = build_attention("softmax", head_dim=8, window=window, dropout=p).train()
    eye = torch.eye(n, dtype=torch.float64).expand(2, 3, n, n)
    weights = naive_softmax(q, k, eye, window=window, **options).detach()
    torch.manual_seed(7)
    dropped = attn(q, k, eye, **options).detach()
    keep = dropped != 0
    torch.testing.assert_close(dropped[keep], weights[keep] / (1 - p))
    assert not keep[weights == 0].any()  # a masked, future or out-of-window key stays out
    kept = keep[weights > 0].double().mean().item()
    assert abs(kept - (1 - p)) < (0.05 if n > 100 else 0.12), kept
    # The same draw on other values: outputs and gradients are the reference's with that mask.
    torch.manual_seed(7)
    out = attn(q, k, v, **options)
    ref = naive_softmax(q, k, v, window=window, keep=keep, dropout=p, **options)
    assert_same_with_gradients(out, ref, (q, k, v))


@torch.no_grad()
def test_attention_dropout_is_off_in_eval_mode_and_in_decoding():
    q, k, v = make_inputs(9, 9)
    for window in (None, 3):
        attn = build_attention("softmax", head_dim=8, window=window, dropout=0.5).eval()
        ref = naive_softmax(q, k, v, causal=True, window=window)
        torch.testing.assert_close(attn(q, k, v, causal=True), ref)
        torch.testing.assert_close(step_all(attn, q, k, v)[0], ref)
        assert attn.train().dropout_p == 0.5 and attn.eval().dropout_p == 0.0
    assert "dropout=0.5" in repr(attn)


def test_bad_attention_dropout_is_named():
    for bad in (-0.1, 1, 1.0, True, "0.1"):
        with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\) \(the chance"):
            build_attention("softmax", head_dim=8, dropout=bad)
