"""Sliding-window softmax by blocks against ``naive_softmax``'s band (float64, outputs and
gradients), the rule that takes the blocks, and the backend on the blocked path."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_softmax
from attn_lightning.attention.ops.local_window import (
    block_size,
    local_window_attention,
    uses_blocks,
)


def _inputs(n: int, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randn(2, 3, n, d, generator=g, dtype=torch.float64, requires_grad=True)
        for d in (8, 8, 5)
    ]


@pytest.mark.parametrize(
    ("n", "window"), [(200, 1), (200, 3), (150, 70), (129, 64), (64, 64), (10, 5)]
)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("masked", [False, True])
def test_blocks_match_the_banded_reference(n, window, causal, masked):
    q, k, v = _inputs(n)
    mask = None
    if masked:  # a hole, and a tail long enough that some queries see no key in their window
        mask = torch.ones(2, n, dtype=torch.bool)
        mask[0, n // 3] = False
        mask[1, n // 2 :] = False
    out = local_window_attention(
        q, k, v, window=window, causal=causal, key_padding_mask=mask, scale=0.3
    )
    ref = naive_softmax(q, k, v, causal=causal, key_padding_mask=mask, scale=0.3, window=window)
    torch.testing.assert_close(out, ref)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=out.dtype)
    got = torch.autograd.grad(out, (q, k, v), cotangent)
    want = torch.autograd.grad(ref, (q, k, v), cotangent)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b)


def test_blocks_are_taken_where_they_do_less_work_than_the_full_scores():
    assert block_size(3) == 64 and block_size(100) == 100
    assert not uses_blocks(128, 16, causal=True)  # 2 blocks of 64: as much as N
    assert uses_blocks(129, 16, causal=True)
    assert not uses_blocks(192, 16, causal=False) and uses_blocks(193, 16, causal=False)


@torch.no_grad()
def test_backend_on_the_blocked_path_matches_its_step_and_the_reference():
    attn = build_attention("softmax", head_dim=8, window=20)
    q, k, v = (t.detach() for t in _inputs(300, seed=2))
    assert uses_blocks(300, 20, causal=True)
    out = attn(q, k, v, causal=True)
    torch.testing.assert_close(out, naive_softmax(q, k, v, causal=True, window=20))
    state, steps = None, []
    for t in range(300):
        step, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
        steps.append(step)
    torch.testing.assert_close(torch.cat(steps, dim=2), out)
    assert state[0].shape[2] == 19


def test_bf16_runs_the_blocks_in_float32_and_returns_bf16():
    attn = build_attention("softmax", head_dim=8, window=4)
    q, k, v = (t.detach().to(torch.bfloat16) for t in _inputs(200, seed=3))
    out = attn(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16
    ref = naive_softmax(q, k, v, causal=True, window=4)
    torch.testing.assert_close(out.double(), ref, rtol=2e-2, atol=2e-2)
