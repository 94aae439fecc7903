"""MultiHeadAttention and the blocks against a naive float64 reference written from the formula."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.attention import available_attentions
from attn_lightning.models import (
    MultiHeadAttention,
    TransformerDecoder,
    TransformerEncoder,
)

B, L, S, E, H = 2, 7, 5, 12, 3
D = E // H
RECURRENT = [
    ("softmax", {}),
    ("linear", {}),
    ("performer", {"num_features": 16}),
    ("polynomial", {"form": "sketch", "sketch_size": 4}),
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
    mha = MultiHeadAttention(E, H, {"name": "softmax"}, projections=projections).double()
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
    mha = MultiHeadAttention(E, H, {"name": "softmax"}, projections=False)
    assert not any(isinstance(m, torch.nn.Linear) for m in mha.modules())
    assert sum(p.numel() for p in mha.parameters()) == 0
    # With one key, attention returns that key's value: the input itself.
    x = torch.randn(B, 1, E)
    torch.testing.assert_close(mha(x), x)


def test_projection_names_for_lora():
    mha = MultiHeadAttention(E, H, {"name": "softmax"})
    names = {n for n, m in mha.named_modules() if isinstance(m, torch.nn.Linear)}
    assert names == {"q_proj", "k_proj", "v_proj", "out_proj"}


@pytest.mark.parametrize(("name", "options"), _recurrent_cases())
def test_mha_step_equals_causal_forward(name, options):
    torch.manual_seed(0)
    mha = MultiHeadAttention(E, H, {"name": name, **options}).double().eval()
    x = torch.randn(B, L, E, dtype=torch.float64)
    full = mha(x, causal=True)
    state, steps = None, []
    for t in range(L):
        out, state = mha.step(x[:, t : t + 1], state)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize(("name", "options"), _recurrent_cases())
def test_encoder_stack_step_equals_causal_forward(name, options):
    torch.manual_seed(0)
    enc = (
        TransformerEncoder(
            num_layers=2, d_model=E, num_heads=H, d_ff=24, attention={"name": name, **options}
        )
        .double()
        .eval()
    )
    x = torch.randn(B, L, E, dtype=torch.float64)
    full = enc(x, causal=True)
    state, steps = None, []
    for t in range(L):
        out, state = enc.step(x[:, t : t + 1], state)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert len(state) == 2


def test_encoder_padding_mask_ignores_padded_tokens():
    torch.manual_seed(0)
    enc = TransformerEncoder(
        num_layers=2, d_model=E, num_heads=H, d_ff=24, attention={"name": "linear"}
    ).eval()
    x = torch.randn(B, L, E)
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[:, -2:] = False
    x2 = x.clone()
    x2[:, -2:] = torch.randn(B, 2, E) * 5
    torch.testing.assert_close(
        enc(x, key_padding_mask=mask)[:, :-2], enc(x2, key_padding_mask=mask)[:, :-2]
    )


def test_decoder_cross_attention_shapes_and_memory_mask():
    torch.manual_seed(0)
    dec = TransformerDecoder(
        num_layers=2,
        d_model=E,
        num_heads=H,
        d_ff=24,
        attention={"name": "softmax"},
        cross_attention={"name": "linear"},
        return_intermediate=True,
    ).eval()
    queries, memory = torch.randn(B, L, E), torch.randn(B, S, E)
    mask = torch.tensor([[True] * S, [True] * 3 + [False] * (S - 3)])
    pos, query_pos = torch.randn(B, S, E), torch.randn(B, L, E)
    out = dec(queries, memory, memory_key_padding_mask=mask, pos=pos, query_pos=query_pos)
    assert out.shape == (2, B, L, E)
    memory2 = memory.clone()
    memory2[1, 3:] = torch.randn(S - 3, E) * 5
    out2 = dec(queries, memory2, memory_key_padding_mask=mask, pos=pos, query_pos=query_pos)
    torch.testing.assert_close(out, out2)
    assert not torch.allclose(out, dec(queries, memory2, pos=pos, query_pos=query_pos))
    assert dec.layers[0].cross_attn.backend.name == "linear"
    assert dec.layers[0].self_attn.backend.name == "softmax"


def test_clear_errors():
    with pytest.raises(ValueError, match="must be a dict with a 'name'"):
        MultiHeadAttention(E, H, {"num_features": 3})
    with pytest.raises(ValueError, match=r"unknown attention 'nope'.*softmax"):
        MultiHeadAttention(E, H, {"name": "nope"})
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'bogus'"):
        MultiHeadAttention(E, H, {"name": "softmax", "bogus": 1})
    with pytest.raises(ValueError, match="multiple of num_heads"):
        MultiHeadAttention(10, 3, {"name": "softmax"})
