"""Optimization attention against ``naive_optimization``: per-query ADMM, explicit S×S inverse."""

from __future__ import annotations

import pytest
import torch
from sklearn.linear_model import Lasso

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_optimization
from attn_lightning.attention.optimization import OptimizationAttention

B, H, D, DV = 2, 2, 4, 3
F64 = torch.float64


def inputs(l_q, s, *, seed=0, dtype=F64, d=D):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(B, H, n, dim, generator=g, dtype=F64).to(dtype).requires_grad_(True)
        for n, dim in ((l_q, d), (s, d), (s, DV))
    )


def out_and_grads(fn, q, k, v, seed=99):
    out = fn(q, k, v)
    g = torch.Generator().manual_seed(seed)
    cot = torch.randn(out.shape, generator=g, dtype=F64).to(out.dtype)  # same draw for any dtype
    grads = torch.autograd.grad((out * cot).sum(), (q, k, v))
    return out, grads


def padding_mask(s):
    mask = torch.ones(B, s, dtype=torch.bool)
    mask[0, -2:] = False
    mask[1, 1] = False
    return mask


CASES = {
    "default": ({}, False),
    "padded": ({}, True),
    "exclude_self": ({"exclude_self": True}, False),
    "signed_padded": ({"signed": True, "lam": 0.05}, True),
    "svd_unnormalized": ({"solver": "svd", "normalize": False, "rho": 0.5, "power": 3.0}, True),
    "exclude_self_padded_signed": ({"exclude_self": True, "signed": True, "iterations": 4}, True),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("shape", [(6, 6), (3, 7)], ids=["self", "cross"])
def test_matches_naive_reference_outputs_and_grads(case, shape):
    options, padded = CASES[case]
    l_q, s = shape
    if options.get("exclude_self") and l_q != s:
        pytest.skip("exclude_self is self-attention only")
    mask = padding_mask(s) if padded else None
    attn = build_attention("optimization", head_dim=D, **options).eval()
    q, k, v = inputs(l_q, s, seed=len(case))
    out, grads = out_and_grads(lambda *t: attn(*t, key_padding_mask=mask), q, k, v)
    # The solver only says how M is applied; the naive reference forms M explicitly.
    formula = {key: value for key, value in options.items() if key != "solver"}
    ref, ref_grads = out_and_grads(
        lambda *t: naive_optimization(*t, key_padding_mask=mask, **formula), q, k, v
    )
    assert ref.abs().sum() > 0
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)
    for g, rg in zip(grads, ref_grads):
        assert rg.abs().sum() > 0
        torch.testing.assert_close(g, rg, rtol=1e-8, atol=1e-10)

    # float32 compute follows the float64 reference to single precision.
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    out32, grads32 = out_and_grads(lambda *t: attn(*t, key_padding_mask=mask), q32, k32, v32)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), ref, rtol=2e-3, atol=1e-3)
    for g, rg in zip(grads32, ref_grads):
        torch.testing.assert_close(g.double(), rg, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("d", [4, 8], ids=["overcomplete", "undercomplete"])
def test_woodbury_and_svd_agree_including_degenerate_spectra(d):
    # With d=8 > S, padding leaves repeated zero singular values, where an SVD backward is NaN.
    q, k, v = inputs(4, 6, seed=3, d=d)
    mask = padding_mask(6)
    mask[0, :3] = False
    results = []
    for solver in ("woodbury", "svd"):
        attn = build_attention("optimization", head_dim=d, solver=solver, rho=0.7)
        results.append(out_and_grads(lambda *t, a=attn: a(*t, key_padding_mask=mask), q, k, v))
    (out_w, grads_w), (out_s, grads_s) = results
    torch.testing.assert_close(out_s, out_w, rtol=1e-9, atol=1e-11)
    for gs, gw in zip(grads_s, grads_w):
        assert torch.isfinite(gs).all()
        torch.testing.assert_close(gs, gw, rtol=1e-8, atol=1e-10)


def test_converged_codes_solve_the_lasso():
    d, s, lam = 8, 12, 0.05
    attn = build_attention("optimization", head_dim=d, iterations=3000, lam=lam)
    q, k, _ = inputs(4, s, seed=5, d=d)
    with torch.no_grad():
        z = attn.sparse_codes(q, k)  # (B, H, L, S)
        qn, kn = (t / t.norm(dim=-1, keepdim=True) for t in (q, k))
        grad = (qn - z @ kn) @ kn.transpose(-1, -2)  # rows of Dmᵀ(q − Dm z)
    support = z != 0
    assert support.any() and (~support).any()  # a genuinely sparse, nonempty solution
    # KKT: |Dmᵀ(q − Dm z)| ≤ λ everywhere, = λ·sign(z) on the support.
    assert (grad.abs() <= lam + 1e-8).all()
    torch.testing.assert_close(grad[support], lam * z[support].sign(), rtol=0, atol=1e-8)
    # sklearn minimises (1/(2n))‖y − Xw‖² + α‖w‖₁ with n = D samples: α = λ / D.
    for b, h, i in [(0, 0, 0), (1, 1, 3), (0, 1, 2)]:
        lasso = Lasso(alpha=lam / d, fit_intercept=False, tol=1e-14, max_iter=200_000)
        lasso.fit(kn[b, h].T.numpy(), qn[b, h, i].numpy())
        torch.testing.assert_close(z[b, h, i], torch.from_numpy(lasso.coef_), rtol=0, atol=1e-6)


def test_exclude_self_zeroes_the_diagonal_and_prevents_collapse():
    q, _, v = inputs(6, 6, seed=7)
    k = q  # self-attention with tied q and k: each query is one of the atoms
    plain = build_attention("optimization", head_dim=D, iterations=1000)
    excl = build_attention("optimization", head_dim=D, iterations=1000, exclude_self=True)
    with torch.no_grad():
        z_plain, z_excl = plain.sparse_codes(q, k), excl.sparse_codes(q, k)
        # Without exclusion the code is the trivial (1 − λ)e_i and attention copies v_i.
        torch.testing.assert_close(
            z_plain.diagonal(dim1=-2, dim2=-1),
            torch.full((B, H, 6), 0.9, dtype=F64),
            rtol=0,
            atol=1e-6,
        )
        torch.testing.assert_close(plain(q, k, v), v, rtol=1e-5, atol=1e-5)
        assert (z_excl.diagonal(dim1=-2, dim2=-1) == 0).all()
        assert z_excl.abs().sum() > 0
        assert not torch.allclose(excl(q, k, v), v, atol=1e-2)
    with pytest.raises(ValueError, match="L=3, S=6"):
        excl(q[:, :, :3], k, v)


def test_random_tokens_act_only_in_training():
    q, k, v = inputs(5, 6, seed=8)
    mask = padding_mask(6)
    noisy = build_attention("optimization", head_dim=D, random_tokens=4)
    clean = build_attention("optimization", head_dim=D)
    with torch.no_grad():
        noisy.eval()
        reference = clean(q, k, v, key_padding_mask=mask)
        assert torch.equal(noisy(q, k, v, key_padding_mask=mask), reference)
        noisy.train()
        torch.manual_seed(0)
        first = noisy(q, k, v, key_padding_mask=mask)
        second = noisy(q, k, v, key_padding_mask=mask)
        assert not torch.allclose(first, second)
        assert not torch.allclose(first, reference)
        # Padding stays exact with random atoms in the dictionary (same draws via the seed).
        k2 = torch.where(mask[:, None, :, None], k, 1e3)
        torch.manual_seed(0)
        torch.testing.assert_close(noisy(q, k2, v, key_padding_mask=mask), first, rtol=0, atol=0)
    clean.train()
    assert torch.equal(clean(q, k, v), clean.eval()(q, k, v))


def test_unnormalized_random_atoms_match_the_keys_scale():
    attn = OptimizationAttention(head_dim=8, random_tokens=4000, normalize=False)
    k = torch.randn(2, 1, 5, 8, dtype=F64) * torch.tensor([1.0, 30.0], dtype=F64).view(2, 1, 1, 1)
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    k = torch.where(mask[:, None, :, None], k, 0.0)  # as _codes hands them over
    atoms = attn._random_atoms(k, mask)
    rms_keys = (k.square().sum((-1, -2)) / mask.sum(-1).view(2, 1)).sqrt()
    rms_atoms = atoms.square().sum(-1).mean(-1).sqrt()
    torch.testing.assert_close(rms_atoms, rms_keys, rtol=0.05, atol=0)
    assert not atoms.requires_grad


def test_low_precision_inputs_compute_in_float32():
    attn = build_attention("optimization", head_dim=D)
    q, k, v = (t.detach().float() for t in inputs(4, 5, seed=9))
    ref = attn(q, k, v)
    out = attn(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=0.1, atol=0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = attn(q, k, v)
    assert auto.dtype == torch.float32
    torch.testing.assert_close(auto, ref)


def test_all_zero_codes_give_zero_output_and_finite_grads():
    attn = build_attention("optimization", head_dim=D, lam=10.0, power=0.5)  # λ kills every code
    q, k, v = inputs(3, 4, seed=10)
    out = attn(q, k, v)
    assert (out == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_has_no_parameters_and_no_causal_form():
    attn = build_attention("optimization", head_dim=D)
    assert sum(p.numel() for p in attn.parameters()) == 0
    assert not attn.supports_causal and not attn.supports_recurrence
    q, k, v = inputs(4, 4)
    with pytest.raises(NotImplementedError, match="optimization"):
        attn(q, k, v, causal=True)
    assert "solver='woodbury'" in repr(attn)


@pytest.mark.parametrize(
    ("option", "match"),
    [
        ({"iterations": 0}, "iterations must be an int >= 1, got 0"),
        ({"iterations": 2.5}, "iterations must be an int >= 1, got 2.5"),
        ({"lam": -0.1}, "lam must be >= 0, got -0.1"),
        ({"rho": 0.0}, "rho must be > 0, got 0.0"),
        ({"power": -1.0}, "power must be > 0, got -1.0"),
        ({"solver": "cg"}, "unknown solver 'cg'; allowed: woodbury, svd"),
        ({"random_tokens": -2}, "random_tokens must be an int >= 0, got -2"),
    ],
)
def test_bad_options_raise(option, match):
    with pytest.raises(ValueError, match=match):
        build_attention("optimization", head_dim=D, **option)
