"""Exact polynomial attention (power kernel, learned coefficients) against ``naive_polynomial``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import FeatureMapAttention, build_attention
from attn_lightning.attention.naive import naive_bounded, naive_polynomial
from attn_lightning.attention.ops import kv_cache
from tests.attention.parity import (
    CASES,
    DV,
    F64,
    B,
    D,
    H,
    assert_parity,
    assert_steps_match_causal_forward,
    padding_mask,
    qkv,
)


def randomize_norm(attn) -> None:
    """Move the learnable LN (if any) off its initial scale 1, bias 0, so parity tests see it."""
    norm = attn.qk_norm
    if norm.weight is not None:
        g = torch.Generator().manual_seed(42)
        with torch.no_grad():
            norm.weight.copy_(0.5 + torch.rand(norm.weight.shape, generator=g, dtype=F64))
            norm.bias.copy_(0.2 * torch.randn(norm.bias.shape, generator=g, dtype=F64))


def inputs_of(attn):
    """q -> q' of ``attn`` for the naive reference, through its LN parameters (with gradients)."""
    norm = attn.qk_norm
    return lambda x: naive_bounded(
        x, normalize=attn.normalize, norm=attn.norm, weight=norm.weight, bias=norm.bias
    )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    "options",
    [{}, {"degree": 2}, {"degree": 6}, {"normalize": False}, {"norm": "fixed"}],
    ids=str,
)
def test_exact_matches_naive_float64(case, options):
    l_q, s, causal, padded = CASES[case]
    attn = build_attention("polynomial", head_dim=D, **options).double()
    randomize_norm(attn)
    mask = padding_mask(s) if padded else None
    degree = options.get("degree", 4)
    assert_parity(
        lambda q, k, v: attn(q, k, v, causal=causal, key_padding_mask=mask),
        lambda q, k, v: naive_polynomial(
            q, k, v, degree=degree, causal=causal, key_padding_mask=mask, inputs=inputs_of(attn)
        ),
        qkv(l_q, s, seed=1),
        params=list(attn.parameters()),
    )


def test_default_norm_is_one_learnable_layer_norm_shared_by_q_and_k():
    attn = build_attention("polynomial", head_dim=D)
    assert sorted(n for n, _ in attn.named_parameters()) == ["qk_norm.bias", "qk_norm.weight"]
    torch.testing.assert_close(attn.qk_norm.weight.detach(), torch.ones(D))  # paper: LN init
    learned = build_attention("polynomial", head_dim=D, learned_coefficients=True)
    # Starts at softmax's logit scale: LN · D^{-1/4}, as the earlier fixed form.
    torch.testing.assert_close(learned.qk_norm.weight.detach(), torch.full((D,), D**-0.25))
    assert not list(build_attention("polynomial", head_dim=D, norm="fixed").parameters())
    assert not list(build_attention("polynomial", head_dim=D, normalize=False).parameters())


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("negative", [False, True], ids=["init", "signed-polynomial"])
def test_learned_coefficients_match_naive_float64(case, negative):
    l_q, s, causal, padded = CASES[case]
    attn = build_attention("polynomial", head_dim=D, learned_coefficients=True).double()
    randomize_norm(attn)
    theta = attn.coefficient_logits
    if negative:  # a_1 dominates: the polynomial is < 0 for d < 0 and the clamp is exercised
        with torch.no_grad():
            theta.copy_(torch.tensor([-4.0, 2.0, -5.0, -6.0, -7.0]))
    mask = padding_mask(s) if padded else None
    inputs = qkv(l_q, s, seed=2)
    if negative:
        bound = inputs_of(attn)
        d = (bound(inputs[0]) @ bound(inputs[1]).transpose(-1, -2)).detach()
        poly = sum(a * d**i for i, a in enumerate(F.softplus(theta.detach())))
        assert (poly < 0).any() and (poly > 0).any()
    assert_parity(
        lambda q, k, v: attn(q, k, v, causal=causal, key_padding_mask=mask),
        lambda q, k, v: naive_polynomial(
            q,
            k,
            v,
            causal=causal,
            key_padding_mask=mask,
            coefficients=F.softplus(theta),
            inputs=inputs_of(attn),
        ),
        inputs,
        params=list(attn.parameters()),
    )


def test_learned_coefficients_start_at_inverse_factorials():
    attn = build_attention("polynomial", head_dim=D, degree=6, learned_coefficients=True)
    want = torch.tensor([1 / math.factorial(i) for i in range(7)])
    torch.testing.assert_close(attn.coefficients.detach(), want, rtol=1e-6, atol=0)
    assert "coefficient_logits" in attn.state_dict()
    d = torch.linspace(-3, 3, 13)
    torch.testing.assert_close(attn.kernel(d).detach(), sum(a * d**i for i, a in enumerate(want)))
    plain = build_attention("polynomial", head_dim=D)
    torch.testing.assert_close(plain.coefficients, F.one_hot(torch.tensor(4), 5).float())
    torch.testing.assert_close(plain.kernel(d), d**4)
    assert "coefficient_logits" not in plain.state_dict()


def test_logs_the_coefficients_and_the_growth_of_the_ln_scale():
    attn = build_attention("polynomial", head_dim=D, degree=2, learned_coefficients=True)
    assert attn.diagnostics() == pytest.approx({"a0": 1.0, "a1": 1.0, "a2": 0.5, "c": 1.0})
    with torch.no_grad():
        attn.qk_norm.weight.mul_(2.0)  # γ × 2 multiplies ⟨q', k'⟩ by 4
    assert attn.diagnostics()["c"] == pytest.approx(4.0)
    unnormalised = build_attention(
        "polynomial", head_dim=D, degree=2, learned_coefficients=True, normalize=False
    )
    assert "c" not in unnormalised.diagnostics()  # no learnable scale
    assert build_attention("polynomial", head_dim=D).diagnostics() == {}


def test_float32_and_half_precision_compute_in_float32():
    attn = build_attention("polynomial", head_dim=D)
    q, k, v = qkv(6, 6, seed=3, dtype=torch.float32)
    ref = naive_polynomial(q.double(), k.double(), v.double(), causal=True)
    out = attn(q, k, v, causal=True)
    torch.testing.assert_close(out, ref.float(), rtol=1e-5, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(attn(q, k, v, causal=True), out, rtol=0, atol=0)
    half = attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), out, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("options", [{}, {"learned_coefficients": True}], ids=str)
def test_step_keeps_a_kv_cache(options):
    attn = build_attention("polynomial", head_dim=D, **options).double()
    state = assert_steps_match_causal_forward(attn)
    assert [tuple(x.shape) for x in state] == [(B, H, 3, D), (B, H, 3, DV)]


@pytest.mark.parametrize("options", [{}, {"learned_coefficients": True}], ids=str)
def test_step_matches_causal_forward_across_cache_growth(options, monkeypatch):
    monkeypatch.setattr(kv_cache, "DEFAULT_CAPACITY", 4)  # 11 steps: capacity 4 -> 8 -> 16
    attn = build_attention("polynomial", head_dim=D, **options).double()
    q, k, v = qkv(11, 11, seed=11)
    full = attn(q, k, v, causal=True)
    state = None
    with torch.no_grad():
        for t in range(11):
            sl = slice(t, t + 1)
            out, state = attn.step(q[:, :, sl], k[:, :, sl], v[:, :, sl], state)
            torch.testing.assert_close(out, full[:, :, sl], rtol=1e-10, atol=1e-12)
    assert [tuple(x.shape) for x in state] == [(B, H, 11, D), (B, H, 11, DV)]
    assert kv_cache._buffers_of(*state).capacity == 16  # preallocated, doubled twice
    torch.testing.assert_close(state[0], attn.normalize_inputs(k))


def test_is_quadratic_not_a_feature_map():
    # The exact form has no φ: benchmarks tell linear-time backends apart by this isinstance.
    attn = build_attention("polynomial", head_dim=D)
    assert not isinstance(attn, FeatureMapAttention) and attn.supports_recurrence
    assert not hasattr(attn, "feature_map") and not hasattr(attn, "redraw_features")
    assert (
        "head_dim=8, degree=4, learned_coefficients=False, normalize=True, norm='learned', "
        "eps=1e-06" in repr(attn)
    )


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"degree": 3}, r"degree must be an even int >= 2 .*got 3"),
        ({"degree": 0}, r"degree must be an even int >= 2 .*got 0"),
        ({"degree": True}, r"degree must be an even int >= 2 .*got True"),
        ({"eps": -1.0}, "eps"),
        # Sketch-only options: a clear error saying where they belong.
        ({"sketch_size": 0}, r"unknown option\(s\) 'sketch_size'.*option of polysketch"),
        ({"chunk_size": 0}, r"unknown option\(s\) 'chunk_size'.*allowed: degree"),
        ({"sketch": "random"}, r"'sketch' is an option of polysketch"),
    ],
    ids=str,
)
def test_bad_options_raise_with_the_allowed_values(options, match):
    with pytest.raises(ValueError, match=match):
        build_attention("polynomial", head_dim=D, **options)
