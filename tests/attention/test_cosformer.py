"""cosFormer against ``naive_cosformer``, its similarity relu(q)ᵀrelu(k)·cos(π/2·(i − j)/M) written
as scores (float64, O(N²)), with M the call's length (the paper's) and a fixed ``horizon``."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_cosformer
from tests.attention.test_linear import grads, inputs


@pytest.mark.parametrize("horizon", [None, 20])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_outputs_and_gradients_match_naive_reference(horizon, causal, masked, chunk_size):
    n = 11  # not a multiple of the chunk: exercises the padded tail
    q, k, v = inputs(n, n if causal else n + 3)
    mask = None
    if masked:
        mask = torch.ones(2, k.shape[2], dtype=torch.bool)
        mask[0, 3] = mask[1, -4:] = False
    attn = build_attention("cosformer", head_dim=6, horizon=horizon, chunk_size=chunk_size)
    out = attn(q, k, v, causal=causal, key_padding_mask=mask)
    ref = naive_cosformer(q, k, v, horizon=horizon, causal=causal, key_padding_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for got, want in zip(grads(out, (q, k, v)), grads(ref, (q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def test_features_give_relu_products_times_the_cosine_of_the_distance():
    q, k, _ = (t.detach() for t in inputs(9, 9))
    attn = build_attention("cosformer", head_dim=6)
    phi_q, phi_k = attn.feature_map(q, is_query=True), attn.feature_map(k, is_query=False)
    assert phi_q.shape[-1] == attn.feature_dim == 12
    i = torch.arange(9, dtype=torch.float64)
    cos = torch.cos(math.pi / 2 * (i[:, None] - i[None, :]) / 9)  # M = N = 9
    want = (q.relu() @ k.relu().mT) * cos
    torch.testing.assert_close(phi_q @ phi_k.mT, want)
    assert cos.min() > 0  # |i - j| < M: every weight is >= 0


def test_the_papers_m_makes_an_output_depend_on_the_calls_length_and_a_horizon_does_not():
    q, k, v = (t.detach() for t in inputs(12, 12))
    for horizon, same in ((None, False), (12, True)):
        attn = build_attention("cosformer", head_dim=6, horizon=horizon)
        full = attn(q, k, v, causal=True)[:, :, :8]
        prefix = attn(q[:, :, :8], k[:, :, :8], v[:, :, :8], causal=True)
        assert torch.allclose(full, prefix) is same
    assert build_attention("cosformer", head_dim=6).length_dependent
    assert not build_attention("cosformer", head_dim=6, horizon=12).length_dependent


def test_step_with_a_horizon_equals_the_causal_forward_and_carries_its_position():
    q, k, v = (t.detach() for t in inputs(7, 7))
    attn = build_attention("cosformer", head_dim=6, horizon=10)
    parallel = attn(q, k, v, causal=True)
    state, outs = None, []
    for i in range(7):
        out, state = attn.step(q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=2), parallel, rtol=1e-10, atol=1e-12)
    assert int(state[2]) == 7 and state[2].device.type == "cpu"
    assert attn.state_size(seq_len=1000, value_dim=5) == 12 * 6  # F·Dv + F, F = 2D


def test_without_a_horizon_there_is_no_step_and_the_error_says_how_to_get_one():
    attn = build_attention("cosformer", head_dim=6)
    q, k, v = (t.detach()[:, :, :1] for t in inputs(1, 1))
    message = r"'cosformer' has no recurrent step\(\).*horizon="
    with pytest.raises(NotImplementedError, match=message):
        attn.step(q, k, v)


def test_a_call_or_a_step_past_the_horizon_is_refused_naming_both():
    attn = build_attention("cosformer", head_dim=6, horizon=4)
    q, k, v = (t.detach() for t in inputs(5, 5))
    with pytest.raises(ValueError, match=r"horizon=4 but got a call of length 5 .*horizon >= 5"):
        attn(q, k, v, causal=True)
    state = None
    for i in range(4):
        _, state = attn.step(q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], state)
    with pytest.raises(ValueError, match=r"horizon=4 and cannot step to position 5"):
        attn.step(q[:, :, 4:5], k[:, :, 4:5], v[:, :, 4:5], state)


@pytest.mark.parametrize("horizon", [0, True, 2.5, "8"])
def test_a_bad_horizon_is_named_with_what_is_allowed(horizon):
    with pytest.raises(ValueError, match=r"horizon must be an int >= 1 \(M, the token distance"):
        build_attention("cosformer", head_dim=6, horizon=horizon)


def test_bf16_autocast_keeps_features_and_states_float32():
    # Features in float32 (sin/cos factors are not exact in bf16), the causal product's states
    # float32: the output is within bf16's rounding of the float64 reference on the same inputs.
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 2, 200, 8, generator=g).bfloat16() for _ in range(3))
    attn = build_attention("cosformer", head_dim=8, horizon=256, chunk_size=32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = attn(q, k, v, causal=True)
    ref = naive_cosformer(q.double(), k.double(), v.double(), horizon=256, causal=True)
    assert low.dtype == torch.bfloat16
    torch.testing.assert_close(low.double(), ref, rtol=2e-2, atol=2e-2)
    out, (s, z, position) = attn.step(q[:, :, :1], k[:, :, :1], v[:, :, :1])
    assert out.dtype == torch.bfloat16 and s.dtype == z.dtype == torch.float32
    assert position.dtype == torch.int64 and int(position) == 1
