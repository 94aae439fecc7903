"""The short convolution against a float64 loop written from its formula (outputs and gradients,
padding), its step against its forward, and the attention sites and models that use it: decoding
state, state sizes and errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.models import MultiHeadAttention, SequenceTransformer, ShortConvolution
from attn_lightning.models.short_conv import _CausalDepthwise
from attn_lightning.models.specs import SequenceSpec
from tests.models.test_multihead import B, E, H, L, _assert_steps_equal_causal_forward

F64 = torch.float64


def naive_short_conv(conv: ShortConvolution, x, mask=None):
    """y[t, c] = silu(Σ_j w[c, j] · x[t - K + 1 + j, c]), zeros before the start and at padding."""
    k = conv.kernel_size
    w = conv.weight[:, 0, :].to(F64)  # (C, K)
    x = x.to(F64) if mask is None else x.to(F64) * mask[..., None]
    out = torch.zeros_like(x)
    for t in range(x.shape[1]):
        for j in range(k):
            s = t - k + 1 + j
            if s >= 0:
                out[:, t] = out[:, t] + w[:, j] * x[:, s]
    return F.silu(out)


@pytest.mark.parametrize("kernel", [1, 2, 4])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("length", [L, 2, 1])  # and sequences shorter than the kernel
def test_matches_the_naive_loop_outputs_and_grads(kernel, padded, length):
    torch.manual_seed(0)
    conv = ShortConvolution(6, kernel).double()
    x = torch.randn(B, length, 6, dtype=F64, requires_grad=True)
    mask = None
    if padded:  # left padding: the first two tokens of row 0 are not real
        mask = torch.ones(B, length, dtype=torch.bool)
        mask[0, :2] = False
    ours, ref = conv(x, mask), naive_short_conv(conv, x, mask)
    torch.testing.assert_close(ours, ref)
    grad = torch.randn_like(ref)
    got = torch.autograd.grad(ours, (x, conv.weight), grad)
    want = torch.autograd.grad(ref, (x, conv.weight), grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


def test_causal_and_padding_adds_nothing():
    torch.manual_seed(0)
    conv = ShortConvolution(6, 4).double()
    x = torch.randn(B, L, 6, dtype=F64)
    changed = x.clone()
    changed[:, 3:] = 9.0  # the future moves nothing before it
    torch.testing.assert_close(conv(changed)[:, :3], conv(x)[:, :3])
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[:, :2] = False
    noisy = x.clone()
    noisy[:, :2] = 100.0  # padded inputs: whatever they hold
    torch.testing.assert_close(conv(noisy, mask)[:, 2:], conv(x, mask)[:, 2:])


def test_step_equals_forward_and_its_cache_is_the_last_inputs():
    torch.manual_seed(0)
    conv = ShortConvolution(6, 3).double()
    x = torch.randn(B, L, 6, dtype=F64)
    cache, steps = None, []
    for t in range(L):
        y, cache = conv.step(x[:, t : t + 1], cache)
        steps.append(y)
    torch.testing.assert_close(torch.cat(steps, dim=1), conv(x))
    torch.testing.assert_close(cache, x[:, -2:])
    assert conv.state_size() == 2 * 6


@pytest.mark.parametrize("name", ["softmax", "linear"])
def test_attention_site_step_equals_causal_forward_and_states_its_size(name):
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=E, num_heads=H, attention={"name": name}, short_conv=4)
    mha = mha.double().eval()
    state = _assert_steps_equal_causal_forward(mha)
    assert state[-1].shape == (B, 3, 3 * E)  # the last K - 1 projected q, k, v
    plain = MultiHeadAttention(d_model=E, num_heads=H, attention={"name": name})
    extra = mha.state_size(seq_len=L) - plain.state_size(seq_len=L)
    assert extra == 3 * 3 * E


def test_the_convolution_is_what_the_site_adds():
    # With the convolution's weight a unit impulse at its last tap, it is silu on q, k, v.
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "linear"}, short_conv=3)
    assert mha.conv is not None
    with torch.no_grad():
        mha.conv.weight.zero_()
        mha.conv.weight[:, 0, -1] = 1.0
    x = torch.randn(B, L, E)
    q, k, v = (F.silu(p(x)) for p in (mha.q_proj, mha.k_proj, mha.v_proj))
    split = mha._split
    want = mha._out(mha.backend(split(q), split(k), split(v), causal=True))
    torch.testing.assert_close(mha(x, causal=True), want)


def test_a_model_with_short_convolutions_decodes_as_it_runs():
    torch.manual_seed(0)
    spec = SequenceSpec(d_model=E, num_heads=H, d_ff=8, num_layers=2, max_len=16, short_conv=4)
    attention = {"name": "linear", "layers": {1: {"name": "softmax"}}}
    model = SequenceTransformer(spec, vocab_size=11, max_len=16, attention=attention).eval()
    tokens = torch.randint(0, 11, (B, L))
    full = model(tokens, causal=True)
    state, steps = None, []
    for t in range(L):
        logits, state = model.step(tokens[:, t], state)
        steps.append(logits)
    torch.testing.assert_close(torch.stack(steps, dim=1), full)
    linear = (E // H) * (E // H) + E // H  # F·Dv + F per head, F = D
    conv = 3 * 3 * E
    assert model.encoder.state_sizes(seq_len=L) == (H * linear + conv, H * 2 * L * E // H + conv)


def test_errors_name_the_value():
    with pytest.raises(ValueError, match=r"short_conv must be >= 0 .* got -1"):
        MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "softmax"}, short_conv=-1)
    with pytest.raises(ValueError, match=r"net\.short_conv must be >= 0, got -2"):
        SequenceSpec(short_conv=-2)
    with pytest.raises(ValueError, match=r"kernel_size >= 1.*kernel_size=0"):
        ShortConvolution(4, 0)
    mha = MultiHeadAttention(d_model=E, num_heads=H, attention={"name": "softmax"}, short_conv=2)
    with pytest.raises(ValueError, match="short_conv is for self-attention: got 7 queries and 5"):
        mha(torch.randn(B, L, E), torch.randn(B, 5, E))


def test_bf16_inputs_get_a_weight_gradient_summed_and_kept_in_float32():
    # a sum over B·L = 16,384 products: rounded to bf16 (8-bit mantissa) it would be ~0.2 % off
    torch.manual_seed(0)
    x = torch.randn(64, 256, 3).bfloat16()
    grad = torch.randn(64, 256, 3).bfloat16()
    weight = torch.randn(3, 1, 2, requires_grad=True)
    y = _CausalDepthwise.apply(x, weight)
    assert y.dtype == torch.bfloat16
    (got,) = torch.autograd.grad(y, weight, grad)
    x64, g64 = x.to(F64), grad.to(F64)
    want = torch.stack([(g64[:, 1:] * x64[:, :-1]).sum((0, 1)), (g64 * x64).sum((0, 1))], -1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got[:, 0].to(F64), want, rtol=1e-5, atol=1e-3)


def test_second_derivatives_are_refused():
    conv = ShortConvolution(3, 2).double()
    x = torch.randn(2, 5, 3, dtype=F64, requires_grad=True)
    (grad_x,) = torch.autograd.grad(conv(x).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once"):
        grad_x.sum().backward()


def test_bf16_outputs_and_input_gradients_are_float32_sums_rounded_once():
    torch.manual_seed(0)
    x = torch.randn(8, 64, 16).bfloat16().requires_grad_()
    weight = torch.randn(16, 1, 4)
    y = _CausalDepthwise.apply(x, weight)
    grad = torch.randn_like(y)
    (grad_x,) = torch.autograd.grad(y, x, grad)
    x64 = x.detach().to(F64).requires_grad_()
    ref = _CausalDepthwise.apply(x64, weight.to(F64))
    (ref_grad,) = torch.autograd.grad(ref, x64, grad.to(F64))
    # one rounding: the bf16 nearest the exact value, but for a rare float32 double rounding (a
    # bf16 weight and bf16 partial sums missed it on ~46 % of these outputs, by up to 2,000 ulps)
    for got, want in ((y, ref), (grad_x, ref_grad)):
        once = want.bfloat16()
        assert (got != once).float().mean() < 1e-3
        torch.testing.assert_close(got, once, rtol=2**-7, atol=1e-5)
