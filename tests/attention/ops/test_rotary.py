"""The rotary turn (RoPE): RoFormer's rotation against a naive float64 loop, in outputs and
gradients; scores that depend on the distance alone; angles not rounded to a half dtype."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.attention.ops.rotary import turn


def naive_rotary(x: torch.Tensor, offset: int, base: float = 10000.0) -> torch.Tensor:
    """RoFormer eq. 34, pair by pair: (x_2i, x_2i+1) turned by (offset + t) / base^(2i / D)."""
    out = x.clone()
    d = x.shape[-1]
    for t in range(x.shape[-2]):
        for i in range(d // 2):
            angle = (offset + t) / base ** (2 * i / d)
            a, b = x[..., t, 2 * i], x[..., t, 2 * i + 1]
            out[..., t, 2 * i] = a * math.cos(angle) - b * math.sin(angle)
            out[..., t, 2 * i + 1] = a * math.sin(angle) + b * math.cos(angle)
    return out


@pytest.mark.parametrize("offset", [0, 5, 1000])
def test_the_rotation_is_roformers_in_outputs_and_gradients(offset):
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64, requires_grad=True)
    (out,), reference = turn(x, offset=offset), naive_rotary(x, offset)
    torch.testing.assert_close(out, reference, atol=1e-12, rtol=1e-12)
    grad = torch.randn_like(out)
    (got,) = torch.autograd.grad(out, x, grad)
    (want,) = torch.autograd.grad(reference, x, grad)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))  # a rotation keeps lengths


def test_tensors_of_one_call_share_the_angles():
    q, k = torch.randn(2, 1, 2, 5, 8, dtype=torch.float64).unbind(0)
    together = turn(q, k, offset=3)
    torch.testing.assert_close(together[1], naive_rotary(k, 3))
    torch.testing.assert_close(together[0], naive_rotary(q, 3))


def test_scores_depend_on_the_distance_alone():
    q, k = torch.randn(2, 1, 1, 16, dtype=torch.float64).unbind(0)

    def score(t: int, s: int) -> float:
        return float((turn(q, offset=t)[0] * turn(k, offset=s)[0]).sum())

    assert score(3, 1) == pytest.approx(score(503, 501), abs=1e-9)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_the_angles_are_not_rounded_to_the_inputs_dtype():
    # Position 1000 in bf16 is 1000 only by luck; θ_i in bf16 is off by 0.4 %: 4 rad at t = 1000.
    x = torch.randn(1, 1, 4, 32)
    (exact,) = turn(x, offset=997)
    (half,) = turn(x.bfloat16(), offset=997)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), exact, atol=0.05, rtol=0.02)


def test_the_base_sets_the_frequencies():
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64)
    (out,) = turn(x, offset=3, base=500_000.0)
    torch.testing.assert_close(out, naive_rotary(x, 3, base=500_000.0), atol=1e-12, rtol=1e-12)
    assert not torch.allclose(out, turn(x, offset=3)[0])
