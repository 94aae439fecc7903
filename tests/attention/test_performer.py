"""Performer (FAVOR+): parity with ``naive_performer`` (float64, O(N²)), convergence to softmax,
orthogonal vs i.i.d. features, redraws, the causal-safe stabiliser and option errors."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_performer, naive_softmax
from attn_lightning.attention.performer import PerformerAttention

B, H, D, DV = 2, 3, 8, 5


def make(**options) -> PerformerAttention:
    torch.manual_seed(0)
    attn = build_attention("performer", head_dim=options.pop("head_dim", D), **options)
    assert isinstance(attn, PerformerAttention)
    return attn


def randn(*shape: int, seed: int, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def outputs_and_grads(fn, q, k, v, cotangent):
    q, k, v = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    out = fn(q, k, v)
    grads = torch.autograd.grad((out.double() * cotangent).sum(), (q, k, v))
    return out.detach(), grads


CASES = {
    "noncausal": dict(l_q=7, s=11, causal=False, masked=False),
    "causal": dict(l_q=10, s=10, causal=True, masked=False),
    "padded": dict(l_q=7, s=11, causal=False, masked=True),
    "padded-causal": dict(l_q=10, s=10, causal=True, masked=True),
}


@pytest.mark.parametrize("kernel", ["positive", "hyperbolic"])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize(
    ("dtype", "tol"), [(torch.float64, 1e-9), (torch.float32, 1e-4)], ids=["fp64", "fp32"]
)
def test_matches_naive_float64_reference(kernel, case, dtype, tol):
    c = CASES[case]
    attn = make(num_features=12, kernel=kernel, chunk_size=3).to(dtype)  # several causal chunks
    q = randn(B, H, c["l_q"], D, seed=1, dtype=dtype)
    k = randn(B, H, c["s"], D, seed=2, dtype=dtype)
    v = randn(B, H, c["s"], DV, seed=3, dtype=dtype)
    mask = None
    if c["masked"]:
        mask = torch.ones(B, c["s"], dtype=torch.bool)
        mask[0, 6:] = False
        mask[1, 2] = False
    cotangent = randn(B, H, c["l_q"], DV, seed=4)
    w = attn.projection_matrix

    def reference(q, k, v):
        return naive_performer(
            q, k, v, w, kernel=kernel, causal=c["causal"], key_padding_mask=mask, eps=attn.eps
        )

    def module(q, k, v):
        return attn(q, k, v, causal=c["causal"], key_padding_mask=mask)

    out, grads = outputs_and_grads(module, q, k, v, cotangent)
    ref, ref_grads = outputs_and_grads(reference, q.double(), k.double(), v.double(), cotangent)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref, rtol=tol, atol=tol)
    for name, g, rg in zip("qkv", grads, ref_grads):
        torch.testing.assert_close(
            g.double(), rg, rtol=tol, atol=tol, msg=lambda m, n=name: f"d/d{n}: {m}"
        )


@pytest.mark.parametrize("kernel", ["positive", "hyperbolic"])
@pytest.mark.parametrize("causal", [False, True])
def test_query_stabiliser_cancels_exactly(kernel, causal):
    # With eps = 0 the shifted query features give the same outputs and gradients as the paper's
    # unshifted φ(q) = exp(Wq − ‖q‖²/2)/√m: the per-token factor cancels in the ratio.
    attn = make(num_features=16, kernel=kernel, eps=0.0, chunk_size=3).double()  # 9 = 3 chunks
    q, k, v = randn(B, H, 9, D, seed=5), randn(B, H, 9, D, seed=6), randn(B, H, 9, DV, seed=7)
    w = attn.projection_matrix

    def paper(q, k, v):
        return naive_performer(q, k, v, w, kernel=kernel, causal=causal, eps=0.0, stabilise=False)

    cotangent = randn(B, H, 9, DV, seed=8)
    out, grads = outputs_and_grads(lambda *t: attn(*t, causal=causal), q, k, v, cotangent)
    ref, ref_grads = outputs_and_grads(paper, q, k, v, cotangent)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-9)
    for g, rg in zip(grads, ref_grads):
        torch.testing.assert_close(g, rg, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kernel", ["positive", "hyperbolic"])
def test_error_vs_softmax_falls_with_num_features(kernel):
    d, n = 16, 24

    def mean_error(m: int) -> float:
        errors = []
        for seed in range(5):
            torch.manual_seed(100 + seed)
            attn = build_attention("performer", head_dim=d, num_features=m, kernel=kernel)
            q, k = (randn(1, 2, n, d, seed=10 * seed + i) * 0.25 for i in (1, 2))
            v = randn(1, 2, n, DV, seed=10 * seed + 3)
            for causal in (False, True):
                exact = naive_softmax(q, k, v, causal=causal)
                approx = attn.double()(q, k, v, causal=causal)
                errors.append(((approx - exact).norm() / exact.norm()).item())
        return sum(errors) / len(errors)

    small, large = mean_error(16), mean_error(1024)
    # MC error ∝ 1/√m: 64× the features should cut it by ≈8; ask for 3 to stay robust.
    assert large < small / 3, (small, large)
    assert large < 0.05, large


def test_orthogonal_features_beat_iid_on_average():
    # Kernel-estimate MSE vs exp(qᵀk/√D), averaged over 64 redraws each (D=16, m=32). Over 160
    # seed/data sets tried the orthogonal/iid MSE ratio was 0.69–0.95 (mean 0.82).
    d, m, n, draws = 16, 32, 64, 64
    q, k = randn(n, d, seed=20) * 0.25, randn(n, d, seed=21) * 0.25
    exact = torch.exp(q @ k.T / math.sqrt(d))
    mse = {}
    for projection in ("orthogonal", "iid"):
        attn = make(head_dim=d, num_features=m, projection=projection).double()
        gen = torch.Generator().manual_seed(1234)
        total = 0.0
        for _ in range(draws):
            attn.redraw_features(gen)
            phi_q, phi_k = (attn.features(x, is_query=False) for x in (q, k))  # unshifted φ
            total += (phi_q @ phi_k.T - exact).square().mean().item()
        mse[projection] = total / draws
    assert mse["orthogonal"] < mse["iid"], mse


def test_orthogonal_rows_are_orthogonal_within_blocks_with_chi_norms():
    attn = make(num_features=20, projection="orthogonal")  # blocks of 8, 8, 4 rows
    w = attn.projection_matrix
    assert w.shape == (20, D)
    unit = w / w.norm(dim=-1, keepdim=True)
    for block in (unit[:8], unit[8:16], unit[16:]):
        gram = block @ block.T
        torch.testing.assert_close(gram, torch.eye(len(block)), atol=1e-5, rtol=0)
    assert w.norm(dim=-1).std() > 0.05  # χ_D lengths, not unit rows


def test_redraw_is_seeded_in_place_and_checkpointed():
    a, b = make(num_features=16), make(num_features=16)
    torch.testing.assert_close(a.projection_matrix, b.projection_matrix)  # same global seed
    before = a.projection_matrix.clone()
    a = a.double()
    buffer = a.projection_matrix
    a.redraw_features(torch.Generator().manual_seed(3))
    b.redraw_features(torch.Generator().manual_seed(3))
    assert a.projection_matrix is buffer and buffer.dtype == torch.float64  # in place
    assert not torch.allclose(buffer.float(), before)
    torch.testing.assert_close(buffer.float(), b.projection_matrix)
    b.redraw_features(torch.Generator().manual_seed(4))
    assert not torch.allclose(buffer.float(), b.projection_matrix)

    assert "projection_matrix" in a.state_dict()
    torch.manual_seed(99)
    restored = build_attention("performer", head_dim=D, num_features=16).double()
    restored.load_state_dict(a.state_dict())
    q, k, v = randn(B, H, 5, D, seed=9), randn(B, H, 5, D, seed=10), randn(B, H, 5, DV, seed=11)
    torch.testing.assert_close(restored(q, k, v), a(q, k, v), rtol=0, atol=0)


@pytest.mark.parametrize("kernel", ["positive", "hyperbolic", "trigonometric"])
def test_step_matches_causal_forward(kernel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the trigonometric warning is tested below
        attn = make(num_features=16, kernel=kernel, chunk_size=3).double()
    # float64: trig's normaliser can be near 0 and amplifies rounding (fp32 is in the contract).
    n = 8
    q, k, v = (randn(B, H, n, dim, seed=s) for s, dim in enumerate((D, D, DV)))
    full = attn(q, k, v, causal=True)
    state = None
    for t in range(n):
        sl = slice(t, t + 1)
        out_t, state = attn.step(q[:, :, sl], k[:, :, sl], v[:, :, sl], state)
        torch.testing.assert_close(out_t, full[:, :, sl], rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kernel", ["positive", "hyperbolic"])
def test_huge_future_key_does_not_move_the_past(kernel):
    # A stabiliser taken over the sequence (max over keys) would let this key underflow every
    # earlier key's features; a per-token one cannot.
    attn = make(num_features=32, kernel=kernel)
    n, t = 10, 4
    q, k, v = (randn(B, H, n, dim, seed=s, dtype=torch.float32) for s, dim in enumerate((D, D, DV)))
    out = attn(q, k, v, causal=True)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    k2[:, :, t + 1] = 1e3 * randn(B, H, D, seed=30, dtype=torch.float32)
    q2[:, :, t + 1] = 1e3 * randn(B, H, D, seed=31, dtype=torch.float32)
    v2[:, :, t + 1] = 1e3
    assert torch.isfinite(attn.features(k2, is_query=False)).all()
    out2 = attn(q2, k2, v2, causal=True)
    assert torch.isfinite(out2).all()
    torch.testing.assert_close(out2[:, :, : t + 1], out[:, :, : t + 1], rtol=1e-6, atol=1e-7)


def test_bf16_autocast_keeps_features_in_float32():
    attn = make(num_features=32)
    q, k, v = (randn(B, H, 6, dim, seed=s, dtype=torch.float32) for s, dim in enumerate((D, D, DV)))
    ref = attn(q, k, v, causal=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert attn.features(q.bfloat16(), is_query=True).dtype == torch.float32
        out = attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=0.05, atol=0.05)


@pytest.mark.parametrize(
    ("option", "value", "allowed"),
    [
        ("kernel", "gaussian", "allowed: positive, hyperbolic, trigonometric"),
        ("projection", "sobol", "allowed: orthogonal, iid"),
        ("num_features", 0, r"num_features must be an int >= 1 \(m, the number of random"),
        ("num_features", -4, r"num_features must be an int >= 1 \(m, the number of random"),
    ],
)
def test_bad_options_raise_with_allowed_values(option, value, allowed):
    with pytest.raises(ValueError, match=allowed) as info:
        build_attention("performer", head_dim=D, **{option: value})
    assert repr(value) in str(info.value)


def test_trigonometric_warns_once_and_others_do_not():
    with pytest.warns(UserWarning, match="negative") as record:
        make(kernel="trigonometric")
    assert len(record) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make(kernel="positive")
        make(kernel="hyperbolic", projection="iid")


def test_feature_dim_and_extra_repr():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trig = make(num_features=16, kernel="trigonometric")
    assert make(num_features=16).feature_dim == 16
    assert make(num_features=16, kernel="hyperbolic").feature_dim == 32
    assert trig.feature_dim == 32
    text = repr(make(num_features=16, kernel="hyperbolic", projection="iid", chunk_size=8))
    for part in ("num_features=16", "kernel='hyperbolic'", "projection='iid'", "chunk_size=8"):
        assert part in text
