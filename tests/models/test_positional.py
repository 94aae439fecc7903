"""Positional encodings: the sinusoidal formula, offsets, limits."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.models import build_positional_encoding


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
        ValueError, match=r"unknown positional encoding 'rope'.*sinusoidal, learned"
    ):
        build_positional_encoding("rope", 4, max_len=8)
    pe = build_positional_encoding("sinusoidal", 4, max_len=8)
    with pytest.raises(ValueError, match="exceed max_len=8"):
        pe(torch.zeros(1, 6, 4), offset=3)
