"""Rotary positions (RoPE): RoFormer's rotation against a naive float64 loop, in outputs and
gradients; scores that depend on the distance alone; decoding from any position; the errors."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.models import SequenceTransformer, VisionTransformer
from attn_lightning.models.multihead import MultiHeadAttention
from attn_lightning.models.rotary import Rotary
from attn_lightning.models.specs import SequenceSpec, VitSpec


def naive_rotary(x: torch.Tensor, offset: int) -> torch.Tensor:
    """RoFormer eq. 34, pair by pair: (x_2i, x_2i+1) turned by (offset + t) / 10000^(2i / D)."""
    out = x.clone()
    d = x.shape[-1]
    for t in range(x.shape[-2]):
        for i in range(d // 2):
            angle = (offset + t) / 10000 ** (2 * i / d)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = a * math.cos(angle) - b * math.sin(angle)
            out[..., t, 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


@pytest.mark.parametrize("offset", [0, 5, 1000])
def test_the_rotation_is_roformers_in_outputs_and_gradients(offset):
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64, requires_grad=True)
    rotary = Rotary(8)
    (out,), reference = rotary(x, offset=offset), naive_rotary(x, offset)
    torch.testing.assert_close(out, reference, atol=1e-12, rtol=1e-12)
    grad = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, x, grad)
    (want,) = torch.autograd.grad(reference, x, grad)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths
    assert not dict(rotary.state_dict())  # a function of D: nothing in checkpoints


def test_scores_depend_on_the_distance_alone():
    q, k = torch.randn(2, 1, 1, 16, dtype=torch.float64).unbind(0)
    rotary = Rotary(16)

    def score(t: int, s: int) -> float:
        return float((rotary(q, offset=t)[0] * rotary(k, offset=s)[0]).sum())

    assert score(3, 1) == pytest.approx(score(503, 501), abs=1e-9)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_the_angles_are_not_rounded_to_the_inputs_dtype():
    # Position 1000 in bf16 is 1000 only by luck; θ_i in bf16 is off by 0.4 %: 4 rad at t = 1000.
    x = torch.randn(1, 1, 4, 32)
    (exact,) = Rotary(32)(x, offset=997)
    (half,) = Rotary(32).to(torch.bfloat16)(x.bfloat16(), offset=997)
    half = half.float()
    torch.testing.assert_close(half, exact, atol=0.05, rtol=0.02)


def _mha(**kwargs) -> MultiHeadAttention:
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, num_heads=2, rotary=True, **kwargs)
    return mha.double().eval()


def test_softmax_decoding_is_the_same_from_any_starting_position():
    # Softmax scores see only distances, so a KV cache started at position 40 decodes as one
    # started at 0; a position added to the embeddings would not.
    mha = _mha(attention={"name": "softmax"})
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    outputs = []
    for start in (0, 40):
        state, steps = None, []
        for t in range(5):
            out, state = mha.step(x[:, t : t + 1], state, offset=start + t)
            steps.append(out)
        outputs.append(torch.cat(steps, dim=1))
    torch.testing.assert_close(outputs[1], outputs[0])
    torch.testing.assert_close(outputs[0], mha(x, causal=True))


@pytest.mark.parametrize("name", ["linear", "softmax"])
def test_step_equals_forward_with_a_short_convolution(name):
    mha = _mha(attention={"name": name}, short_conv=3)
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    state, steps = None, []
    for t in range(7):
        out, state = mha.step(x[:, t : t + 1], state, offset=t)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), mha(x, causal=True))


def test_cross_attention_and_odd_widths_are_refused():
    mha = _mha(attention={"name": "softmax"})
    with pytest.raises(ValueError, match="rotary is for self-attention: got 3 queries and 5 keys"):
        mha(torch.randn(1, 3, 16).double(), torch.randn(1, 5, 16).double())
    with pytest.raises(ValueError, match="each head's width must be even, got head_dim 5"):
        MultiHeadAttention(d_model=16, num_heads=2, head_dim=5, attention={"name": "softmax"},
                           rotary=True)  # fmt: skip
    with pytest.raises(
        ValueError,
        match=r"net.positional rotary .* each head's width \(net.d_model / net.num_heads\) "
        r"must be even, got 3",
    ):
        SequenceSpec(d_model=6, num_heads=2, positional="rotary")
    with pytest.raises(ValueError, match=r"width \(net.head_dim\) must be even, got 7"):
        SequenceSpec(d_model=16, num_heads=2, head_dim=7, positional="rotary")
    SequenceSpec(d_model=6, num_heads=2, head_dim=4, positional="rotary")  # the heads' width


def test_a_rotary_model_reads_order_and_runs_past_its_max_len():
    torch.manual_seed(0)
    spec = SequenceSpec(d_model=16, num_heads=2, num_layers=1, d_ff=32, positional="rotary")
    net = SequenceTransformer(spec, vocab_size=13, max_len=8, attention={"name": "softmax"}).eval()
    tokens = torch.tensor([[4, 7, 2, 9, 1, 5, 3]])
    swapped = tokens[:, [0, 3, 2, 1, 4, 5, 6]]
    out, out_swapped = net(tokens, causal=True), net(swapped, causal=True)
    assert not torch.allclose(out[:, 5], out_swapped[:, 5], atol=1e-4)  # order is seen
    assert net(torch.randint(13, (1, 20)), causal=True).shape == (1, 20, 13)  # no table to end


def test_a_vision_transformer_turns_its_patches_in_raster_order():
    torch.manual_seed(0)
    spec = VitSpec(d_model=16, num_heads=2, num_layers=1, d_ff=32, positional="rotary")
    vit = VisionTransformer(spec, image_size=4, num_classes=3, attention={"name": "softmax"})
    assert all(block.attn.rotary is not None for block in vit.encoder.layers)
    assert vit(torch.randn(2, 4, 4)).shape == (2, 3)
