"""Positional encodings: the sinusoidal formula, offsets, limits; none: a causal model that
knows order from its mask alone; rotary: q and k turned in every self-attention, in forward and
step (the turn itself: tests/attention/ops/test_rotary.py)."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.models import SequenceTransformer, VisionTransformer, build_positional_encoding
from attn_lightning.models.multihead import MultiHeadAttention
from attn_lightning.models.specs import SequenceSpec, VitSpec


def test_sinusoidal_matches_formula_and_offset():
    pe = build_positional_encoding("sinusoidal", 6, max_len=20)
    x = torch.zeros(1, 5, 6)
    out = pe(x, offset=3)
    for t in range(5):
        for i in range(3):
            angle = (t + 3) / 10000 ** (2 * i / 6)
            assert out[0, t, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-6)
            assert out[0, t, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-6)
    assert "table" not in pe.state_dict()  # not a weight: checkpoints do not depend on max_len


def test_odd_width_and_learned_table():
    assert build_positional_encoding("sinusoidal", 5, max_len=4)(torch.zeros(2, 4, 5)).shape == (
        2,
        4,
        5,
    )
    learned = build_positional_encoding("learned", 4, max_len=8)
    assert "table" in learned.state_dict()
    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(learned(x, offset=2), x + learned.table[2:5])


def test_errors_name_the_allowed_values():
    with pytest.raises(
        ValueError, match=r"unknown positional encoding 'rope'.*sinusoidal, learned, rotary, none"
    ):
        build_positional_encoding("rope", 4, max_len=8)
    pe = build_positional_encoding("sinusoidal", 4, max_len=8)
    with pytest.raises(ValueError, match="exceed max_len=8"):
        pe(torch.zeros(1, 6, 4), offset=3)


def test_none_adds_nothing_at_any_length_or_offset():
    pe = build_positional_encoding("none", 4, max_len=8)
    x = torch.randn(2, 12, 4)
    assert pe(x, offset=30) is x and not pe.state_dict()


@pytest.mark.parametrize("positional", ["none", "learned"])
def test_without_positions_a_causal_output_depends_on_the_earlier_tokens_as_a_set(positional):
    # One layer: swapping tokens 1 and 3 leaves the output at position 5 unchanged without
    # positions (a causal softmax average over a set), and changes it with them; decoding agrees
    # either way. (A second layer would see order through the first's prefixes: the mask's own
    # implicit positions.)
    torch.manual_seed(0)
    spec = SequenceSpec(d_model=16, num_heads=2, num_layers=1, d_ff=32, positional=positional)
    net = SequenceTransformer(spec, vocab_size=13, max_len=8, attention={"name": "softmax"}).eval()
    tokens = torch.tensor([[4, 7, 2, 9, 1, 5, 3]])
    swapped = tokens[:, [0, 3, 2, 1, 4, 5, 6]]
    out, out_swapped = net(tokens, causal=True), net(swapped, causal=True)
    same = torch.allclose(out[:, 5], out_swapped[:, 5], atol=1e-6)
    assert same == (positional == "none")
    assert not torch.allclose(out[:, 2], out_swapped[:, 2], atol=1e-6)  # sees 7, not 9
    state = None
    for t in range(tokens.shape[1]):
        logits, state = net.step(tokens[:, t], state)
        torch.testing.assert_close(logits, out[:, t], atol=1e-5, rtol=1e-4)


def _mha(**kwargs) -> MultiHeadAttention:
    torch.manual_seed(0)
    mha = MultiHeadAttention(d_model=16, num_heads=2, rotary=10000.0, **kwargs)
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
                           rotary=10000.0)  # fmt: skip
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
    assert all(block.attn.rotary for block in vit.encoder.layers)
    assert vit(torch.randn(2, 4, 4)).shape == (2, 3)


def test_rotary_positions_and_a_rotary_backend_are_not_stacked():
    with pytest.raises(ValueError, match=r"rotary positions twice.*attention 'linear'.*keep one"):
        _mha(attention={"name": "linear", "rotary": True})
    spec = SequenceSpec(d_model=16, num_heads=2, num_layers=1, d_ff=32, positional="none")
    net = SequenceTransformer(
        spec, vocab_size=13, max_len=8, attention={"name": "linear", "rotary": True}
    ).eval()
    tokens = torch.tensor([[4, 7, 2, 9, 1, 5, 3]])
    out, state = net(tokens, causal=True), None
    for t in range(tokens.shape[1]):  # the backend's own position rides in its state
        logits, state = net.step(tokens[:, t], state)
        torch.testing.assert_close(logits, out[:, t], atol=1e-5, rtol=1e-4)


def test_the_rotary_base_sets_the_angles_and_is_checked():
    torch.manual_seed(0)
    spec = SequenceSpec(
        d_model=16, num_heads=2, num_layers=1, d_ff=32, positional="rotary", rotary_base=500_000
    )
    net = SequenceTransformer(spec, vocab_size=13, max_len=8, attention={"name": "softmax"})
    net = net.double().eval()
    assert all(block.attn.rotary == 500_000.0 for block in net.encoder.layers)
    tokens = torch.tensor([[4, 7, 2, 9, 1, 5, 3]])
    out, state = net(tokens, causal=True), None
    for t in range(tokens.shape[1]):
        logits, state = net.step(tokens[:, t], state)
        torch.testing.assert_close(logits, out[:, t])
    default = SequenceTransformer(
        SequenceSpec(d_model=16, num_heads=2, num_layers=1, d_ff=32, positional="rotary"),
        vocab_size=13,
        max_len=8,
        attention={"name": "softmax"},
    ).double()
    default.load_state_dict(net.state_dict())  # the same weights, another base
    assert not torch.allclose(default.eval()(tokens, causal=True), out, atol=1e-6)
    with pytest.raises(ValueError, match=r"net.rotary_base must be a number > 1 .* got 0.5"):
        SequenceSpec(positional="rotary", rotary_base=0.5)
    with pytest.raises(ValueError, match=r"net.rotary_base \(20.0\) is the base of net.positional"):
        SequenceSpec(positional="learned", rotary_base=20.0)
    with pytest.raises(ValueError, match=r"rotary must be a number > 1 .* got True"):
        MultiHeadAttention(d_model=16, num_heads=2, attention={"name": "softmax"}, rotary=True)
