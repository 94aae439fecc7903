"""``state_size``: the floats per head a backend keeps to decode, equal to what ``step`` keeps.

Counted on the real states: after N steps, the floating elements of every tensor ``step``
returned, per batch row and head, must equal ``state_size(seq_len=N, value_dim=Dv)`` for every
registered backend and variant (an integer token counter is not a float per head). So the
number a recall-vs-memory plot puts on its x-axis cannot drift from what decoding holds.
"""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention import build_attention
from tests.attention.conftest import backend_cases
from tests.attention.test_contract import DV, B, D, H, make, qkv, value_dim


def floats_per_head(state: tuple[torch.Tensor, ...]) -> int:
    counted = sum(t.numel() for t in state if t.is_floating_point())
    assert counted % (B * H) == 0, [tuple(t.shape) for t in state]
    return counted // (B * H)


@pytest.mark.parametrize(("name", "options"), backend_cases())
def test_state_size_counts_the_step_state(name, options):
    attn = make(name, options)
    if not attn.supports_recurrence:
        with pytest.raises(NotImplementedError, match=rf"{name!r} has no state size.*step"):
            attn.state_size(seq_len=4)
        return
    dv = value_dim(attn)
    q, k, v = qkv(7, 7, seed=2, dv=dv)
    state = None
    for t in range(7):
        sl = slice(t, t + 1)
        _, state = attn.step(q[:, :, sl], k[:, :, sl], v[:, :, sl], state)
        assert floats_per_head(state) == attn.state_size(seq_len=t + 1, value_dim=dv), t


def test_the_formulas():
    # Feature maps: F·Dv + F at any length; softmax: the KV cache, N·(D + Dv).
    linear = build_attention("linear", head_dim=D)
    assert linear.state_size(seq_len=10, value_dim=DV) == D * DV + D
    assert linear.state_size(seq_len=10_000) == D * D + D  # Dv defaults to D
    performer = build_attention("performer", head_dim=D, num_features=16, kernel="hyperbolic")
    assert performer.state_size(seq_len=3, value_dim=DV) == 32 * (DV + 1)
    sketch = build_attention("polysketch", head_dim=D, sketch_size=8)
    assert sketch.state_size(seq_len=3, value_dim=DV) == 36 * (DV + 1)  # r(r+1)/2 = 36
    softmax = build_attention("softmax", head_dim=D)
    assert softmax.state_size(seq_len=256) == 2 * 256 * D
    assert softmax.state_size(seq_len=0) == 0


def test_bad_requests_name_the_value():
    attn = build_attention("linear", head_dim=D)
    with pytest.raises(ValueError, match=r"seq_len must be an int >= 0.*got -1"):
        attn.state_size(seq_len=-1)
    with pytest.raises(ValueError, match=r"value_dim must be an int >= 1.*got 0"):
        attn.state_size(seq_len=3, value_dim=0)
