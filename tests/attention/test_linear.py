"""Linear attention against ``naive_linear`` (float64, O(N²)); its kernels: tests/attention/ops."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.linear import FEATURE_MAPS, _elu_plus_one_values
from attn_lightning.attention.naive import naive_linear


def inputs(l_q, s, d=6, dv=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = lambda n, dd: (2, 3, n, dd)  # noqa: E731
    q = torch.randn(shape(l_q, d), generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(shape(s, d), generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(shape(s, dv), generator=g, dtype=torch.float64, requires_grad=True)
    return q, k, v


def grads(out, tensors, seed=1):
    g = torch.Generator().manual_seed(seed)
    weight = torch.randn(out.shape, generator=g, dtype=out.dtype)
    return torch.autograd.grad((out * weight).sum(), tensors)


@pytest.mark.parametrize("feature_map", sorted(FEATURE_MAPS))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_outputs_and_gradients_match_naive_reference(feature_map, causal, masked, chunk_size):
    n = 11  # not a multiple of the chunk: exercises the padded tail
    q, k, v = inputs(n, n if causal else n + 3)
    mask = None
    if masked:
        mask = torch.ones(2, k.shape[2], dtype=torch.bool)
        mask[0, 3] = mask[1, -4:] = False
    attn = build_attention("linear", head_dim=6, feature_map=feature_map, chunk_size=chunk_size)
    out = attn(q, k, v, causal=causal, key_padding_mask=mask)
    ref = naive_linear(q, k, v, feature_map=feature_map, causal=causal, key_padding_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    for got, want in zip(grads(out, (q, k, v)), grads(ref, (q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def test_huge_future_key_does_not_move_the_past():
    # The chunked form never adds-then-subtracts a future term, so even a future key whose
    # features are 1e30 leaves earlier outputs bit-identical.
    q, k, v = (t.detach().float() for t in inputs(12, 12))
    attn = build_attention("linear", head_dim=6, feature_map="squared_relu", chunk_size=8)
    out = attn(q, k, v, causal=True)
    k2 = k.clone()
    k2[:, :, 5] = 1e15
    out2 = attn(q, k2, v, causal=True)
    assert torch.equal(out[:, :, :5], out2[:, :, :5])


def test_bf16_autocast_long_causal_stays_fp32_accurate():
    """Under bf16 autocast, causal linear attention at N = 16,384 stays finite and within 1e-2
    relative error of the float32 result (states and normalisers are kept in float32)."""
    n, d = 16_384, 16
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, d, generator=g) for _ in range(3))
    attn = build_attention("linear", head_dim=d)
    ref = attn(q, k, v, causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
    assert low.dtype == torch.bfloat16
    assert torch.isfinite(low).all()
    rel = (low.float() - ref).norm() / ref.norm()
    assert rel < 1e-2, f"relative error {rel:.3g}"


def test_step_state_is_float32_under_bf16():
    attn = build_attention("linear", head_dim=4)
    x = torch.randn(1, 1, 1, 4, dtype=torch.bfloat16)
    out, (s, z) = attn.step(x, x, x)
    assert out.dtype == torch.bfloat16
    assert s.dtype == z.dtype == torch.float32


def test_unknown_feature_map_lists_allowed():
    with pytest.raises(ValueError, match="allowed: elu, relu"):
        build_attention("linear", head_dim=4, feature_map="gelu")


def test_elu_plus_one_forms_agree():
    # The blocked CPU form and the two-kernel form used on GPUs give elu(x) + 1.
    x = torch.randn(2, 3, 40, 8, dtype=torch.float64) * 3
    want = torch.nn.functional.elu(x) + 1
    for blocked in (True, False):
        torch.testing.assert_close(_elu_plus_one_values(x, blocked=blocked), want)
    assert torch.autograd.gradcheck(FEATURE_MAPS["elu"], (x[0, 0, :5].clone().requires_grad_(),))


@pytest.mark.parametrize("feature_map", ["elu", "relu"])
def test_bf16_causal_matches_float64_reference(feature_map):
    # bf16 inputs run the causal product as bf16 GEMMs (float32 states): outputs and gradients
    # stay within bf16's precision of the float64 reference on the same rounded inputs.
    n, d = 300, 8  # not a multiple of the chunk
    g = torch.Generator().manual_seed(2)
    q, k = (torch.randn(2, 2, n, d, generator=g).bfloat16() for _ in range(2))
    v = (torch.randn(2, 2, n, d, generator=g) + 1.5).bfloat16()
    attn = build_attention("linear", head_dim=d, feature_map=feature_map, chunk_size=32)
    low = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attn(*low, causal=True)
    ref64 = [t.double().requires_grad_() for t in (q, k, v)]
    ref = naive_linear(*ref64, feature_map=feature_map, causal=True)
    assert out.dtype == torch.bfloat16
    assert ((out.double() - ref).norm() / ref.norm()) < 1e-2
    # The same upstream gradient for both (``grads`` would draw it in each output's dtype).
    for got, want in zip(grads(out.double(), low), grads(ref, ref64)):
        assert got.dtype == torch.bfloat16
        assert ((got.double() - want).norm() / want.norm()) < 3e-2


@pytest.mark.parametrize("causal", [False, True])
def test_bf16_features_only_where_bf16_gemms_read_them(causal):
    # φ is evaluated in bf16 only for the torch causal kernel's bf16 GEMMs (no float32 copies);
    # the non-causal product and float32 inputs keep float32 features.
    attn = build_attention("linear", head_dim=4, implementation="torch")
    seen = []
    phi = attn._phi
    attn._phi = lambda x: seen.append(x.dtype) or phi(x)
    x = torch.randn(1, 1, 6, 4)
    attn(x, x, x, causal=causal)
    attn(x.bfloat16(), x.bfloat16(), x.bfloat16(), causal=causal)
    assert seen == [torch.float32] * 2 + [torch.bfloat16 if causal else torch.float32] * 2


@pytest.mark.parametrize("feature_map", ["elu", "relu"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 64])
def test_rotary_form_matches_roformers_in_outputs_and_gradients(
    feature_map, causal, masked, chunk_size
):
    # RoFormer §3.3: turned features in the numerator, plain ones in the normaliser.
    n = 11  # not a multiple of the chunk
    q, k, v = inputs(n, n)
    mask = None
    if masked:
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[0, 3] = mask[1, -4:] = False
    attn = build_attention(
        "linear", head_dim=6, feature_map=feature_map, chunk_size=chunk_size, rotary=True
    )
    out = attn(q, k, v, causal=causal, key_padding_mask=mask)
    ref = naive_linear(
        q, k, v, feature_map=feature_map, causal=causal, key_padding_mask=mask, rotary=True
    )
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
    plain = naive_linear(q, k, v, feature_map=feature_map, causal=causal, key_padding_mask=mask)
    assert not torch.allclose(out, plain, atol=1e-3)  # the turn changes the numerator
    for got, want in zip(grads(out, (q, k, v)), grads(ref, (q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def test_rotary_step_keeps_its_position_and_float32_states_under_bf16():
    attn = build_attention("linear", head_dim=4, rotary=True)
    x = torch.randn(1, 1, 5, 4)
    state, outs = None, []
    for t in range(5):
        out, state = attn.step(x[:, :, t : t + 1], x[:, :, t : t + 1], x[:, :, t : t + 1], state)
        outs.append(out)
    torch.testing.assert_close(torch.cat(outs, dim=2), attn(x, x, x, causal=True))
    assert int(state[2]) == 4 and state[2].device.type == "cpu"
    low = x[:, :, :1].bfloat16()
    out, (s, z, _) = attn.step(low, low, low)
    assert out.dtype == torch.bfloat16 and s.dtype == z.dtype == torch.float32


def test_rotary_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match=r"turns pairs of features.*got 5 \(head_dim 5\)"):
        build_attention("linear", head_dim=5, rotary=True)
    with pytest.raises(ValueError, match=r"runs on the torch kernels.*'triton'; allowed: auto"):
        build_attention("linear", head_dim=4, rotary=True, implementation="triton")
    with pytest.raises(ValueError, match="rotary must be true or false, got 'yes'"):
        build_attention("linear", head_dim=4, rotary="yes")
    attn = build_attention("linear", head_dim=4, rotary=True)
    q, k = torch.randn(1, 1, 3, 4), torch.randn(1, 1, 5, 4)
    with pytest.raises(ValueError, match="self-attention"):
        attn(q, k, k)
