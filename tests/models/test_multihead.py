"""MultiHeadAttention against a naive float64 reference written from the formula: projections,
heads, recurrent steps."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from attn_lightning.attention import available_attentions
from attn_lightning.models import MultiHeadAttention

B, L, S, E, H = 2, 7, 5, 12, 3
D = E // H
RECURRENT = [
    ("softmax", {}),
    ("linear", {}),
    ("performer", {"num_features": 16}),
    ("polysketch", {"sketch_size": 4}),
]


def _recurrent_cases():
    return [
        pytest.param(name, opts, id=name)
        for name, opts in RECURRENT
        if name in available_attentions()
    ]


def naive_mha(mha: MultiHeadAttention, x, ctx, *, causal=False, mask=None):
    """softmax(q kᵀ/√D) v per head with explicit weights, everything in float64."""
    if mha.projections:
        q = x @ mha.q_proj.weight.T + mha.q_proj.bias
        k = ctx @ mha.k_proj.weight.T + mha.k_proj.bias
        v = ctx @ mha.v_proj.weight.T + mha.v_proj.bias
    else:
        q, k, v = x, ctx, ctx
    outs = []
    for h in range(H):
        sl = slice(h * D, (h + 1) * D)
        scores = q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(D)  # (B, L, S)
        allowed = torch.ones_like(scores, dtype=torch.bool)
        if causal:
            allowed &= torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        if mask is not None:
            allowed &= mask[:, None, :]
        weights = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
        outs.append(weights @ v[..., sl])
    out = torch.cat(outs, dim=-1)
    return out @ mha.out_proj.weight.T + mha.out_proj.bias if mha.projections else out


@pytest.mark.parametrize("projections", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_mha_matches_naive_reference_outputs_and_grads(projections, causal):
    torch.manual_seed(0)
    mha = MultiHeadAttention(
        d_model=E, num_heads=H, attention={"name": "softmax"}, projections=projections
    ).double()
    x = torch.randn(B, L, E, dtype=torch.float64, requires_grad=True)
    ctx = x if causal else torch.randn(B, S, E, dtype=torch.float64, requires_grad=True)
    mask = None if causal else torch.tensor([[True] * S, [True] * (S - 2) + [False] * 2])
    out = mha(x, ctx, causal=causal, key_padding_mask=mask)
    ref = naive_mha(mha, x, ctx, causal=causal, mask=mask)
    torch.testing.assert_close(out, ref)
    grad_out = torch.randn_like(out)
    inputs = [x] if causal else [x, ctx]
    params = list(mha.parameters())
    got = torch.autograd.grad(out, inputs + params, grad_out)
    want = torch.autograd.grad(ref, inputs + params, grad_out)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


def test_projections_false_has_no_linear_layers_and_splits_input():
    mha = MultiHeadAttention(
        d_model=E, num_heads=H, attention={"name": "softmax"}, projections=False
    )
    assert not any(isinstance(m, torch.nn.Linear) for m in mha.modules())
    assert sum(p.numel() for p in mha.parameters()) == 0
    # With one key, attention returns that key's value: the input itself.
    x = torch.randn(B, 1, E)
    torch.testing.assert_close(mha(x), x)


def test_projections_no_qk_keeps_only_v_and_out_and_matches_hand_computation():
    torch.manual_seed(0)
    mha = MultiHeadAttention(
        d_model=E, num_heads=H, attention={"name": "softmax"}, projections="no_qk"
    ).double()
    names = {n for n, m in mha.named_modules() if isinstance(m, torch.nn.Linear)}
    assert names == {"v_proj", "out_proj"} and mha.q_proj is None and mha.k_proj is None
    assert {n for n, _ in mha.named_parameters()} == {
        "v_proj.weight",
        "v_proj.bias",
        "out_proj.weight",
        "out_proj.bias",
    }
    x = torch.randn(B, L, E, dtype=torch.float64)
    ctx = torch.randn(B, S, E, dtype=torch.float64)
    v = ctx @ mha.v_proj.weight.T + mha.v_proj.bias  # (B, S, E); q = x and k = ctx as given
    heads = []
    for h in range(H):
        sl = slice(h * D, (h + 1) * D)
        weights = (x[..., sl] @ ctx[..., sl].transpose(-1, -2) / math.sqrt(D)).softmax(-1)
        heads.append(weights @ v[..., sl])
    want = torch.cat(heads, dim=-1) @ mha.out_proj.weight.T + mha.out_proj.bias
    torch.testing.assert_close(mha(x, ctx), want)


def test_projections_true_and_false_keep_their_state_dict_keys():
    full = MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "softmax"})
    assert set(full.state_dict()) == {
        f"{p}_proj.{t}" for p in ("q", "k", "v", "out") for t in ("weight", "bias")
    }
    none = MultiHeadAttention(
        d_model=E, num_heads=H, attention={"name": "softmax"}, projections=False
    )
    assert set(none.state_dict()) == set()


@pytest.mark.parametrize("bad", ["none", "no_q", 1, None])
def test_bad_projections_name_the_allowed_values(bad):
    with pytest.raises(ValueError, match=rf"true or false .* or 'no_qk' .*got {bad!r}"):
        MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "softmax"}, projections=bad)


def test_projection_names_for_lora():
    mha = MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "softmax"})
    names = {n for n, m in mha.named_modules() if isinstance(m, torch.nn.Linear)}
    assert names == {"q_proj", "k_proj", "v_proj", "out_proj"}


def _assert_steps_equal_causal_forward(module: torch.nn.Module) -> Any:
    """Token-by-token ``step`` of ``module`` equals its causal forward; the final state."""
    x = torch.randn(B, L, E, dtype=torch.float64)
    full = module(x, causal=True)
    state, steps = None, []
    for t in range(L):
        out, state = module.step(x[:, t : t + 1], state)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    return state


@pytest.mark.parametrize(("name", "options"), _recurrent_cases())
def test_mha_step_equals_causal_forward(name, options):
    torch.manual_seed(0)
    mha = (
        MultiHeadAttention(d_model=E, num_heads=H, attention={"name": name, **options})
        .double()
        .eval()
    )
    _assert_steps_equal_causal_forward(mha)


def test_constructor_is_keyword_only():
    with pytest.raises(TypeError):
        MultiHeadAttention(E, H, {"name": "softmax"})  # type: ignore[misc]


def test_clear_errors():
    with pytest.raises(ValueError, match="must be a dict with a 'name'"):
        MultiHeadAttention(d_model=E, num_heads=H, attention={"num_features": 3})
    with pytest.raises(ValueError, match=r"unknown attention 'nope'.*softmax"):
        MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "nope"})
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'bogus'"):
        MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "softmax", "bogus": 1})
    with pytest.raises(
        ValueError, match=r"d_model \(10\) must be a positive multiple of num_heads \(3\)"
    ):
        MultiHeadAttention(d_model=10, num_heads=3, attention={"name": "softmax"})
    with pytest.raises(ValueError, match=r"d_model \(0\) must be a positive multiple"):
        MultiHeadAttention(d_model=0, num_heads=3, attention={"name": "softmax"})


@pytest.mark.parametrize("name", ["linear", "performer", "polysketch", "mean"])
def test_batch_one_causal_backward_through_the_head_merge(name):
    # The gradient reaching the causal kernel through the head merge is strided; at B = 1 a
    # reshape of it stays a strided view, which the kernel's backward once failed to take.
    attn = MultiHeadAttention(d_model=16, num_heads=2, attention={"name": name, "chunk_size": 4})
    x = torch.randn(1, 24, 16, requires_grad=True)
    attn(x, causal=True).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


# head_dim apart from d_model / num_heads: the heads are cut from I = H·D_h projected channels.
DH = 5  # E = 12, H = 3: I = 15, not E


def test_head_dim_apart_from_width_matches_naive_reference_outputs_and_grads():
    torch.manual_seed(0)
    mha = MultiHeadAttention(
        d_model=E, num_heads=H, head_dim=DH, attention={"name": "softmax"}
    ).double()
    assert (mha.head_dim, mha.inner_dim) == (DH, H * DH)
    assert mha.q_proj.weight.shape == (H * DH, E) and mha.out_proj.weight.shape == (E, H * DH)
    x = torch.randn(B, L, E, dtype=torch.float64, requires_grad=True)
    q, k, v = (x @ p.weight.T + p.bias for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    heads = []
    for h in range(H):
        sl = slice(h * DH, (h + 1) * DH)
        scores = q[..., sl] @ k[..., sl].transpose(-1, -2) / math.sqrt(DH)
        scores = scores.masked_fill(~torch.ones(L, L, dtype=torch.bool).tril(), float("-inf"))
        heads.append(scores.softmax(-1) @ v[..., sl])
    want = torch.cat(heads, dim=-1) @ mha.out_proj.weight.T + mha.out_proj.bias
    out = mha(x, causal=True)
    torch.testing.assert_close(out, want)
    grad_out = torch.randn_like(out)
    params = [x, *mha.parameters()]
    got = torch.autograd.grad(out, params, grad_out)
    for g, w in zip(got, torch.autograd.grad(want, params, grad_out), strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("short_conv", [0, 3])
def test_head_dim_apart_from_width_steps_as_it_runs_and_counts_its_state(short_conv):
    torch.manual_seed(0)
    mha = MultiHeadAttention(
        d_model=E, num_heads=H, head_dim=DH, attention={"name": "linear"}, short_conv=short_conv
    )
    _assert_steps_equal_causal_forward(mha.double().eval())
    conv = (short_conv - 1) * 3 * H * DH if short_conv else 0  # the last K - 1 inputs of q, k, v
    assert mha.state_size(seq_len=L) == H * (DH * DH + DH) + conv  # F·Dv + F a head, F = Dv = D_h


def test_head_dim_errors_name_the_value():
    with pytest.raises(ValueError, match=r"head_dim must be >= 1 .*got 0"):
        MultiHeadAttention(d_model=E, num_heads=H, head_dim=0, attention={"name": "softmax"})
    for projections in (False, "no_qk"):
        with pytest.raises(ValueError, match=r"head_dim 5 × num_heads 3 = 15 must equal d_model"):
            MultiHeadAttention(
                d_model=E,
                num_heads=H,
                head_dim=DH,
                attention={"name": "softmax"},
                projections=projections,
            )
    # d_model need not be a multiple of num_heads once head_dim is given
    assert MultiHeadAttention(d_model=10, num_heads=3, head_dim=4, attention={"name": "softmax"})
