"""The mixed block form of PolySketch (``block_local``) against ``naive_block_mixed``: outputs and
gradients in float64, the decoding step against the causal forward, and argument checks."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention.naive import naive_block_mixed
from attn_lightning.attention.ops.block_local import block_mixed_attention, block_mixed_step

F64 = torch.float64
B, H, FEATURES, D, DV = 2, 2, 5, 4, 3
GARBAGE = 1e3  # what masked keys hold: large enough to show if any of it leaks in


def inputs(l_q: int, s: int, *, seed: int = 0, dtype: torch.dtype = F64) -> list[torch.Tensor]:
    """phi_q, phi_k ≥ 0 (uniform), v ~ N(0, 1), qn, kn = LN(N(0, 1))·D^{-1/4} as the backend
    makes them."""
    g = torch.Generator().manual_seed(seed)

    def normed(n: int) -> torch.Tensor:
        x = torch.randn(B, H, n, D, generator=g, dtype=dtype)
        return F.layer_norm(x, (D,)) * D**-0.25

    phi_q = torch.rand(B, H, l_q, FEATURES, generator=g, dtype=dtype)
    phi_k = torch.rand(B, H, s, FEATURES, generator=g, dtype=dtype)
    v = torch.randn(B, H, s, DV, generator=g, dtype=dtype)
    return [phi_q, phi_k, v, normed(l_q), normed(s)]


def garbage_mask(tensors: list[torch.Tensor], s: int) -> torch.Tensor:
    """``(B, S)``: batch 0 loses its last 3 keys, batch 1 its key 1; those keys are overwritten
    with ``GARBAGE``-sized random values in phi_k, v and kn (in place). Random, not constant: a
    constant kn is orthogonal to a layer-normed qn (zero mean) and would hide a leak."""
    mask = torch.ones(B, s, dtype=torch.bool)
    mask[0, s - 3 :] = False
    mask[1, 1] = False
    g = torch.Generator().manual_seed(123)
    for t in tensors[1:3] + tensors[4:]:
        noise = GARBAGE * torch.randn(t.shape, generator=g, dtype=t.dtype)
        t.copy_(t.where(mask[:, None, :, None], noise))
    return mask


def assert_matches_naive(tensors, *, block, degree=4, causal, mask=None, offset=1.0, eps=0.0):
    """Outputs and the gradients w.r.t. all five inputs (a random cotangent) agree in float64."""
    leaves = [t.clone().requires_grad_(True) for t in tensors]
    ref_leaves = [t.clone().requires_grad_(True) for t in tensors]
    options = dict(block=block, degree=degree, causal=causal, key_padding_mask=mask)
    out = block_mixed_attention(*leaves, **options, offset=offset, eps=eps)
    ref = naive_block_mixed(*ref_leaves, **options, offset=offset, eps=eps)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=F64)
    grads = torch.autograd.grad(out, leaves, cotangent)
    ref_grads = torch.autograd.grad(ref, ref_leaves, cotangent)
    for got, want in zip(grads, ref_grads):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)


def power_attention(qn, kn, v, *, degree, causal, mask=None):
    """Exact ``(qn·kn)^p`` attention with offset 1, written out (the all-near limit)."""
    sim = (qn @ kn.mT) ** degree
    if causal:
        sim = sim.tril()
    if mask is not None:
        sim = sim.masked_fill(~mask[:, None, None, :], 0.0)
    return sim @ v / (1 + sim.sum(-1, keepdim=True))


BLOCKINGS = {  # name -> (N, b)
    "divisible": (16, 4),
    "ragged": (13, 4),
    "b=1": (13, 1),
    "b=N": (13, 13),
    "b>N": (13, 16),
}


@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
@pytest.mark.parametrize("blocking", BLOCKINGS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_matches_naive(causal, blocking, padded):
    n, b = BLOCKINGS[blocking]
    tensors = inputs(n, n, seed=1)
    mask = garbage_mask(tensors, n) if padded else None
    assert_matches_naive(tensors, block=b, causal=causal, mask=mask)


@pytest.mark.parametrize(("l_q", "s"), [(5, 13), (13, 5), (7, 8)])
@pytest.mark.parametrize("padded", [False, True], ids=["full", "padded"])
def test_cross_attention_matches_naive(l_q, s, padded):
    tensors = inputs(l_q, s, seed=2)
    mask = garbage_mask(tensors, s) if padded else None
    assert_matches_naive(tensors, block=4, causal=False, mask=mask)


@pytest.mark.parametrize("degree", [2, 6])
def test_other_degrees_and_offset_match_naive(degree):
    assert_matches_naive(inputs(10, 10, seed=3), block=3, degree=degree, causal=True, offset=0.5)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_one_block_is_exact_power_attention(causal):
    tensors = inputs(9, 9, seed=4)
    mask = garbage_mask(tensors, 9)
    out = block_mixed_attention(
        *tensors, block=9, degree=4, causal=causal, key_padding_mask=mask, offset=1.0, eps=0.0
    )
    _, _, v, qn, kn = tensors
    want = power_attention(qn, kn, v, degree=4, causal=causal, mask=mask)
    torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_exact_features_make_the_block_size_irrelevant(causal):
    # With φ(x) = x ⊗ x, φ(q)·φ(k) = (q·k)² exactly: near and far agree, so every b gives
    # degree-2 power attention (checks the far part independently of the naive reference).
    _, _, v, qn, kn = inputs(11, 11, seed=5)

    def phi(x):
        return (x[..., :, None] * x[..., None, :]).flatten(-2)

    want = power_attention(qn, kn, v, degree=2, causal=causal)
    for b in (1, 3, 4, 11):
        out = block_mixed_attention(
            phi(qn), phi(kn), v, qn, kn, block=b, degree=2, causal=causal,
            key_padding_mask=None, offset=1.0, eps=0.0,
        )  # fmt: skip
        torch.testing.assert_close(out, want, rtol=1e-10, atol=1e-12)


def test_trailing_masked_keys_change_nothing():
    tensors = inputs(6, 13, seed=6)
    mask = torch.ones(B, 13, dtype=torch.bool)
    mask[:, 10:] = False
    options = dict(block=4, degree=4, causal=False, offset=1.0, eps=0.0)
    out = block_mixed_attention(*tensors, key_padding_mask=mask, **options)
    phi_q, phi_k, v, qn, kn = tensors
    cut = block_mixed_attention(
        phi_q, phi_k[:, :, :10], v[:, :, :10], qn, kn[:, :, :10], key_padding_mask=None, **options
    )
    torch.testing.assert_close(out, cut, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_non_finite_masked_keys_change_nothing(causal):
    # NaN·0 = NaN: masked keys must be zeroed, not multiplied by a zero weight.
    tensors = inputs(8, 8, seed=12)
    mask = garbage_mask(tensors, 8)
    options = dict(block=3, degree=4, causal=causal, key_padding_mask=mask, offset=1.0, eps=0.0)
    want = block_mixed_attention(*tensors, **options)
    for bad in (float("nan"), float("inf")):
        poisoned = [t.clone() for t in tensors]
        for t in poisoned[1:3] + poisoned[4:]:
            t.masked_fill_(~mask[:, None, :, None], bad)
        torch.testing.assert_close(block_mixed_attention(*poisoned, **options), want)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "noncausal"])
def test_query_without_keys_gets_zero(causal):
    tensors = inputs(8, 8, seed=7)
    mask = torch.ones(B, 8, dtype=torch.bool)
    mask[0] = False  # batch 0 sees nothing
    tensors = [t.requires_grad_(True) for t in tensors]
    out = block_mixed_attention(
        *tensors, block=3, degree=4, causal=causal, key_padding_mask=mask, offset=0.0, eps=0.0
    )
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in tensors)


def step_through(tensors, *, block, degree=4, offset=1.0, eps=0.0):
    """Outputs ``(B, H, N, Dv)`` of stepping tokens 0..N-1 one at a time; the last state."""
    state, outs = None, []
    for i in range(tensors[0].shape[2]):
        token = [t[:, :, i : i + 1] for t in tensors]
        out, state = block_mixed_step(
            *token, state, block=block, degree=degree, offset=offset, eps=eps
        )
        outs.append(out)
    return torch.cat(outs, dim=2), state


@pytest.mark.parametrize("block", [1, 4, 5, 16])
def test_step_equals_causal_forward(block):
    tensors = inputs(14, 14, seed=8)  # b = 4: boundaries at 4, 8, 12
    stepped, state = step_through(tensors, block=block)
    full = block_mixed_attention(
        *tensors, block=block, degree=4, causal=True, key_padding_mask=None, offset=1.0, eps=0.0
    )
    torch.testing.assert_close(stepped, full, rtol=1e-10, atol=1e-12)
    assert int(state[-1]) == 14


def test_step_leaves_its_state_alone():
    tensors = inputs(9, 9, seed=9)
    _, state = step_through([t[:, :, :8] for t in tensors], block=4)  # next step folds a block
    before = [t.clone() for t in state]
    token = [t[:, :, 8:] for t in tensors]
    first, _ = block_mixed_step(*token, state, block=4, degree=4, offset=1.0, eps=0.0)
    again, _ = block_mixed_step(*token, state, block=4, degree=4, offset=1.0, eps=0.0)
    assert all(torch.equal(a, b) for a, b in zip(state, before))
    assert torch.equal(first, again)


def test_float32_agrees_with_float64():
    tensors = inputs(13, 13, seed=10)
    options = dict(block=4, degree=4, key_padding_mask=None, offset=1.0, eps=1e-6)
    for causal in (True, False):
        want = block_mixed_attention(*tensors, causal=causal, **options)
        got = block_mixed_attention(*[t.float() for t in tensors], causal=causal, **options)
        assert got.dtype == torch.float32
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-5)
    stepped, state = step_through([t.float() for t in tensors], block=4, eps=1e-6)
    assert stepped.dtype == torch.float32 and state[0].dtype == torch.float32
    torch.testing.assert_close(
        stepped, block_mixed_attention(*tensors, causal=True, **options).float(), rtol=1e-4,
        atol=1e-5,
    )  # fmt: skip


def test_half_inputs_are_computed_in_float32():
    tensors = [t.half() for t in inputs(6, 6, seed=11)]
    out = block_mixed_attention(
        *tensors, block=4, degree=4, causal=True, key_padding_mask=None, offset=1.0, eps=1e-6
    )
    assert out.dtype == torch.float32


# ------------------------------------------------------------------------------ bad arguments

GOOD = dict(block=4, degree=4, causal=False, key_padding_mask=None, offset=1.0, eps=0.0)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"block": 0}, r"block must be an int >= 1 .*got 0"),
        ({"block": -2}, r"block must be an int >= 1 .*got -2"),
        ({"block": 2.0}, r"block must be an int >= 1 .*got 2\.0"),
        ({"degree": 3}, r"degree must be an even int >= 2 .*got 3"),
        ({"degree": 0}, r"degree must be an even int >= 2 .*got 0"),
        ({"causal": True}, r"causal block attention needs L == S, got L=5 and S=7"),
        ({"key_padding_mask": torch.ones(B, 6, dtype=torch.bool)}, r"\(B, S\) = \(2, 7\)"),
        ({"key_padding_mask": torch.ones(B, 7)}, r"must be a bool tensor .*torch\.float32"),
    ],
    ids=str,
)
def test_bad_options_raise(change, match):
    with pytest.raises(ValueError, match=match):
        block_mixed_attention(*inputs(5, 7), **{**GOOD, **change})


@pytest.mark.parametrize(
    ("index", "shape", "match"),
    [
        (0, (B, H, 5, 6), r"feature size F, got 6 and 5"),
        (1, (B, H, 6, FEATURES), r"key length S, got \{'phi_k': 6, 'v': 7, 'kn': 7\}"),
        (3, (B, H, 4, D), r"query length L, got 5 and 4"),
        (4, (B, H, 7, D + 1), r"head size D, got 4 and 5"),
        (2, (B, 1, 7, DV), r"share \(B, H\)"),
        (2, (H, 7, DV), r"v must be 4-D"),
    ],
)
def test_bad_shapes_raise(index, shape, match):
    tensors = inputs(5, 7)
    tensors[index] = torch.zeros(shape, dtype=F64)
    with pytest.raises(ValueError, match=match):
        block_mixed_attention(*tensors, **GOOD)


def test_bad_step_arguments_raise():
    tensors = inputs(2, 2)
    options = dict(degree=4, offset=1.0, eps=0.0)
    with pytest.raises(ValueError, match=r"one token: all lengths must be 1, got \[2, 2"):
        block_mixed_step(*tensors, None, block=4, **options)
    token = [t[:, :, :1] for t in tensors]
    _, state = block_mixed_step(*token, None, block=4, **options)
    with pytest.raises(ValueError, match=r"state buf_kn has shape .*block=3"):
        block_mixed_step(*token, state, block=3, **options)
    with pytest.raises(ValueError, match=r"got a tuple of 2 tensors"):
        block_mixed_step(*token, state[:2], block=4, **options)
    with pytest.raises(ValueError, match=r"degree must be an even int >= 2 .*got 5"):
        block_mixed_step(*token, state, block=4, degree=5, offset=1.0, eps=0.0)
