"""Positional encodings: the sinusoidal formula, offsets, limits; none: a causal model that
knows order from its mask alone."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.models import SequenceTransformer, build_positional_encoding
from attn_lightning.models.specs import SequenceSpec


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
