"""The chunked prefix sum and causal normaliser against the plain cumsum in float64, in our
(B, H, N, F) layout and fla's [B, T, H, K]."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops.causal_normaliser import causal_normaliser, prefix_sum

DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=[
            pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
        ],
    ),
]
SHAPES = [  # (N, chunk): one token, N below, equal to, just over and not a multiple of the chunk
    (1, 64),
    (5, 64),
    (63, 64),
    (64, 64),
    (65, 64),
    (200, 64),
    (1000, 64),
    (200, 7),
    (200, 1),
    (130, 1000),
]


def rand(n: int, f: int = 5, *, dtype=torch.float32, device="cpu", seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(2, 3, n, f, generator=g, dtype=torch.float64).to(device, dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("n", "chunk"), SHAPES)
def test_prefix_sum_is_the_cumsum_along_n(n, chunk, device):
    x = rand(n, device=device)
    got = prefix_sum(x, chunk_size=chunk)
    assert got.shape == x.shape and got.dtype == torch.float32
    want = x.double().cumsum(dim=2)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("n", "chunk"), SHAPES)
def test_prefix_sum_is_exact_on_small_integers(n, chunk):
    # Sums of small integers are exact in float32: any regrouping gives the same bits, and a
    # wrong term (a later token, a chunk counted twice or not at all) shows as a difference.
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 100, (2, 3, n, 4), generator=g).float()
    assert torch.equal(prefix_sum(x, chunk_size=chunk), x.cumsum(dim=2))


def test_one_chunk_is_the_single_strided_scan_it_replaced():
    x = rand(300)
    assert torch.equal(prefix_sum(x, chunk_size=300), x.cumsum(dim=2))


def test_half_inputs_sum_in_float32_and_float64_stays_float64():
    x = rand(3000, dtype=torch.bfloat16)
    got = prefix_sum(x)
    assert got.dtype == torch.float32
    # A bf16 cumsum would lose all precision long before 3,000 terms of ~0.5.
    torch.testing.assert_close(got, x.float().cumsum(dim=2), rtol=1e-6, atol=1e-4)
    assert prefix_sum(rand(10, dtype=torch.float64)).dtype == torch.float64


def test_a_later_key_changes_no_earlier_prefix():
    x = rand(150)
    later = x.clone()
    later[:, :, 100:] = 1e30
    got, changed = prefix_sum(x), prefix_sum(later)
    assert torch.equal(got[:, :, :100], changed[:, :, :100])


@pytest.mark.parametrize(("n", "chunk"), [(1, 4), (7, 3), (9, 4), (12, 4), (10, 20)])
def test_prefix_sum_gradcheck(n, chunk):
    x = rand(n, 3, dtype=torch.float64).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: prefix_sum(t, chunk_size=chunk), (x,))


def naive_normaliser(phi_q: torch.Tensor, phi_k: torch.Tensor) -> torch.Tensor:
    """Σ_{j≤i} φ(q_i)ᵀφ(k_j) written plainly: the row sums of the lower triangle of φ(Q)φ(K)ᵀ."""
    scores = phi_q.double() @ phi_k.double().transpose(-1, -2)
    return scores.tril().sum(dim=-1, keepdim=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(("n", "chunk"), SHAPES)
def test_normaliser_matches_the_plain_formula_with_padded_keys(n, chunk, device):
    phi_q = rand(n, device=device, seed=2).requires_grad_(True)
    phi_k = rand(n, device=device, seed=3)
    mask = torch.ones(2, n, dtype=torch.bool, device=device)
    mask[0, n // 2] = mask[1, -(n // 3 + 1) :] = False
    phi_k = phi_k.masked_fill(~mask[:, None, :, None], 0.0).requires_grad_(True)
    got = causal_normaliser(phi_q, phi_k, chunk_size=chunk)
    assert got.shape == (2, 3, n, 1) and got.dtype == torch.float32
    want = naive_normaliser(phi_q, phi_k)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5)
    cotangent = torch.randn(got.shape, generator=torch.Generator().manual_seed(4)).to(device)
    grads = torch.autograd.grad(got, (phi_q, phi_k), cotangent)
    wants = torch.autograd.grad(want, (phi_q, phi_k), cotangent.double())
    for g, w in zip(grads, wants):
        torch.testing.assert_close(g.double(), w.double(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("n", "chunk"), [(1, 4), (9, 4), (11, 64)])
def test_normaliser_gradcheck(n, chunk):
    phi_q = rand(n, 3, dtype=torch.float64, seed=5).requires_grad_(True)
    phi_k = rand(n, 3, dtype=torch.float64, seed=6).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda q, k: causal_normaliser(q, k, chunk_size=chunk), (phi_q, phi_k)
    )


def test_a_query_that_sees_no_key_gets_exactly_zero():
    phi_q, phi_k = rand(70, seed=7), rand(70, seed=8)
    phi_k[1] = 0.0
    assert torch.equal(causal_normaliser(phi_q, phi_k)[1], torch.zeros(3, 70, 1))


@pytest.mark.parametrize(("n", "chunk"), [(5, 64), (200, 64), (130, 7)])
def test_fla_layout_tokens_on_dim_1(n, chunk):
    # The adapter sums in fla's [B, T, H, K] layout, where it already laid the features out.
    phi_q, phi_k = rand(n, seed=9), rand(n, seed=10)
    ours = causal_normaliser(phi_q, phi_k, chunk_size=chunk)  # (B, H, N, 1)
    flas = causal_normaliser(phi_q.transpose(1, 2), phi_k.transpose(1, 2), dim=1, chunk_size=chunk)
    assert flas.shape == (2, n, 3, 1)
    torch.testing.assert_close(flas.transpose(1, 2), ours, rtol=1e-6, atol=1e-6)
    x = torch.randint(0, 100, (2, n, 3, 4)).float()
    assert torch.equal(prefix_sum(x, dim=1, chunk_size=chunk), x.cumsum(dim=1))


def test_bf16_features_are_summed_in_float32_as_they_are():
    # Small integers are exact in bf16 and their sums exact in float32: nothing is rounded.
    x = torch.randint(0, 100, (2, 3, 3000, 4)).bfloat16()
    got = prefix_sum(x)
    assert got.dtype == torch.float32 and torch.equal(got, x.float().cumsum(dim=2))
    q = torch.randint(0, 4, (2, 3, 3000, 4)).bfloat16()
    den = causal_normaliser(q, x)
    assert den.dtype == torch.float32
    assert torch.equal(den, (q.float() * x.float().cumsum(dim=2)).sum(-1, keepdim=True))


@pytest.mark.parametrize(
    ("dim", "chunk", "says"),
    [(2, 0, "chunk_size must be at least 1, got 0"), (4, 64, "a dimension of a 4-d tensor, got 4")],
)
def test_bad_input_is_one_clear_error(dim, chunk, says):
    with pytest.raises(ValueError, match=says):
        prefix_sum(torch.zeros(2, 3, 5, 4), dim=dim, chunk_size=chunk)
