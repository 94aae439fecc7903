"""Taylor attention (Based's second-order Taylor features) against ``naive_taylor``, the kernel
``1 + s + s²/2`` written as scores (float64, O(N²)); its kernels: tests/attention/ops."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_taylor
from attn_lightning.attention.taylor import taylor_feature_dim
from tests.attention.test_linear import grads, inputs


@pytest.mark.parametrize("feature_dim", [None, 3])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize(
    ("evaluation", "chunk_size"),
    [("features", 1), ("features", 4), ("features", 64), ("kernel", 4)],
)
def test_outputs_and_gradients_match_naive_reference(
    feature_dim, causal, masked, evaluation, chunk_size
):
    n = 11  # not a multiple of the chunk: exercises the padded tail
    q, k, v = inputs(n, n if causal else n + 3)
    mask = None
    if masked:
        mask = torch.ones(2, k.shape[2], dtype=torch.bool)
        mask[0, 3] = mask[1, -4:] = False
    attn = build_attention(
        "taylor", head_dim=6, feature_dim=feature_dim, evaluation=evaluation, chunk_size=chunk_size
    )
    out = attn(q, k, v, causal=causal, key_padding_mask=mask)
    ref = naive_taylor(q, k, v, feature_dim=feature_dim, causal=causal, key_padding_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for got, want in zip(grads(out, (q, k, v)), grads(ref, (q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("feature_dim", [1, 4, 6])
def test_features_give_the_second_order_taylor_polynomial_of_exp(feature_dim):
    q, k, _ = (t.detach() for t in inputs(5, 7))
    attn = build_attention("taylor", head_dim=6, feature_dim=feature_dim)
    phi_q, phi_k = attn.feature_map(q, is_query=True), attn.feature_map(k, is_query=False)
    assert phi_q.shape[-1] == attn.feature_dim == taylor_feature_dim(feature_dim)
    assert taylor_feature_dim(16) == 153  # Based's d' = 16: 1 + 16 + 136
    s = q[..., :feature_dim] @ k[..., :feature_dim].transpose(-1, -2) / math.sqrt(feature_dim)
    torch.testing.assert_close(phi_q @ phi_k.transpose(-1, -2), 1 + s + s**2 / 2)
    assert (1 + s + s**2 / 2).min() >= 0.5  # ((s + 1)² + 1) / 2: positive without a clamp


def test_coordinates_past_feature_dim_are_not_read():
    q, k, v = (t.detach() for t in inputs(9, 9))
    attn = build_attention("taylor", head_dim=6, feature_dim=2)
    moved = [t.clone() for t in (q, k)]
    for t in moved:
        t[..., 2:] = torch.randn_like(t[..., 2:]) * 100
    assert torch.equal(attn(q, k, v, causal=True), attn(*moved, v, causal=True))


def test_decode_state_is_features_times_values_plus_features():
    attn = build_attention("taylor", head_dim=32, feature_dim=16)
    assert attn.state_size(seq_len=1000, value_dim=32) == 153 * 33


@pytest.mark.parametrize(
    ("feature_dim", "message"),
    [
        (0, r"feature_dim must be an int >= 1 \(coordinates of q and k"),
        (True, r"feature_dim must be an int >= 1"),
        ("4", r"feature_dim must be an int >= 1"),
        (7, r"feature_dim must be <= head_dim = 6 \(coordinates of q and k .*got 7"),
    ],
)
def test_a_bad_feature_dim_is_named_with_what_is_allowed(feature_dim, message):
    with pytest.raises(ValueError, match=message):
        build_attention("taylor", head_dim=6, feature_dim=feature_dim)


def test_auto_takes_the_score_form_at_recall_lengths_and_the_features_when_long(monkeypatch):
    # d' = 16 (F = 153), Dv 32: MQAR's 64 tokens want the (L, S) scores, 4,096 tokens the features.
    attn = build_attention("taylor", head_dim=32, feature_dim=16)
    q, k, v = (torch.randn(1, 1, n, 32) for n in (64, 64, 64))
    forms = []
    monkeypatch.setattr(
        "attn_lightning.attention.taylor.taylor_score_attention",
        lambda *a, **kw: forms.append("kernel") or torch.zeros_like(v),
    )
    attn(q, k, v, causal=True)
    assert forms == ["kernel"]
    long = torch.randn(1, 1, 4096, 32)
    attn(long, long, long, causal=True)  # the feature form: the score form is not called
    assert forms == ["kernel"]


def test_step_uses_the_features_whatever_the_evaluation():
    q, k, v = (t.detach() for t in inputs(7, 7))
    attn = build_attention("taylor", head_dim=6, feature_dim=4, evaluation="kernel")
    parallel = attn(q, k, v, causal=True)
    state, outs = None, []
    for i in range(q.shape[2]):
        out, state = attn.step(q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=2), parallel, rtol=1e-10, atol=1e-12)


def test_an_unknown_evaluation_is_named_with_what_is_allowed():
    with pytest.raises(ValueError, match=r"unknown evaluation 'dense'.*auto, features, kernel"):
        build_attention("taylor", head_dim=6, evaluation="dense")
