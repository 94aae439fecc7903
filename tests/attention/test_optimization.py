"""Optimization attention against ``naive_optimization`` (per-query ADMM, explicit S×S inverse),
the lasso's optimality conditions, and its random-token and diagnostics bookkeeping."""

from __future__ import annotations

import copy
import io

import pytest
import torch

from attn_lightning.attention import build_attention
from attn_lightning.attention.naive import naive_optimization
from attn_lightning.attention.optimization import (
    DEFAULT_RANDOM_TOKENS,
    OptimizationAttention,
    keys_to_carry,
)

B, H, D, DV = 2, 2, 4, 3
F64 = torch.float64


def inputs(l_q, s, *, seed=0, dtype=F64, d=D, dv=DV):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(B, H, n, dim, generator=g, dtype=F64).to(dtype).requires_grad_(True)
        for n, dim in ((l_q, d), (s, d), (s, dv))
    )


def out_and_grads(fn, q, k, v, seed=99):
    out = fn(q, k, v)
    g = torch.Generator().manual_seed(seed)
    cot = torch.randn(out.shape, generator=g, dtype=F64).to(out.dtype)  # same draw for any dtype
    # allow_unused: the values dictionary leaves k out of the graph (its gradient is None).
    grads = torch.autograd.grad((out * cot).sum(), (q, k, v), allow_unused=True)
    return out, grads


def padding_mask(s):
    mask = torch.ones(B, s, dtype=torch.bool)
    mask[0, -2:] = False
    mask[1, 1] = False
    return mask


# (options, padded, value dim): the values dictionary needs Dv == D.
CASES = {
    "default": ({}, False, D),
    "padded": ({}, True, D),
    "keys": ({"dictionary": "keys"}, False, DV),
    "keys_padded_normalized": ({"dictionary": "keys", "normalize": True}, True, DV),
    "exclude_self": ({"exclude_self": True}, False, D),
    "keys_exclude_self": ({"dictionary": "keys", "exclude_self": True}, False, DV),
    "signed_padded": ({"signed": True, "lam": 0.05}, True, D),
    "svd_normalized": ({"solver": "svd", "normalize": True, "rho": 0.5, "power": 3.0}, True, D),
    "exclude_self_padded_signed": (
        {"exclude_self": True, "signed": True, "iterations": 4},
        True,
        D,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("shape", [(6, 6), (3, 7)], ids=["self", "cross"])
def test_matches_naive_reference_outputs_and_grads(case, shape):
    options, padded, dv = CASES[case]
    l_q, s = shape
    if options.get("exclude_self") and l_q != s:
        pytest.skip("exclude_self is self-attention only")
    mask = padding_mask(s) if padded else None
    attn = build_attention("optimization", head_dim=D, **options).eval()
    q, k, v = inputs(l_q, s, seed=len(case), dv=dv)
    out, grads = out_and_grads(lambda *t: attn(*t, key_padding_mask=mask), q, k, v)
    # The solver only says how M is applied; the naive reference forms M explicitly.
    formula = {key: value for key, value in options.items() if key != "solver"}
    ref, ref_grads = out_and_grads(
        lambda *t: naive_optimization(*t, key_padding_mask=mask, **formula), q, k, v
    )
    assert ref.abs().sum() > 0
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)
    for g, rg in zip(grads, ref_grads):
        if g is None:  # k is not used with the values dictionary
            assert rg is None and options.get("dictionary", "values") == "values"
            continue
        assert rg.abs().sum() > 0
        torch.testing.assert_close(g, rg, rtol=1e-8, atol=1e-10)

    # float32 compute follows the float64 reference to single precision.
    q32, k32, v32 = (t.detach().float().requires_grad_(True) for t in (q, k, v))
    out32 = attn(q32, k32, v32, key_padding_mask=mask)
    assert out32.dtype == torch.float32
    torch.testing.assert_close(out32.double(), ref, rtol=2e-3, atol=1e-3)


def test_values_dictionary_leaves_k_unused_and_keys_dictionary_uses_it():
    q, k, v = inputs(4, 5, seed=1, dv=D)
    values = build_attention("optimization", head_dim=D).eval()
    keys = build_attention("optimization", head_dim=D, dictionary="keys").eval()
    out = values(q, k, v)
    assert torch.equal(out, values(q, torch.randn_like(k), v))
    assert not torch.allclose(keys(q, k, v), out)
    # With v = k the two readings coincide.
    torch.testing.assert_close(values(q, k, k), keys(q, k, k), rtol=0, atol=0)


@pytest.mark.parametrize("d", [4, 8], ids=["overcomplete", "undercomplete"])
def test_woodbury_and_svd_agree_including_degenerate_spectra(d):
    # With d=8 > S, padding leaves repeated zero singular values, where an SVD backward is NaN.
    q, k, v = inputs(4, 6, seed=3, d=d, dv=d)
    mask = padding_mask(6)
    mask[0, :3] = False
    results = []
    for solver in ("woodbury", "svd"):
        attn = build_attention("optimization", head_dim=d, solver=solver, rho=0.7, random_tokens=0)
        results.append(out_and_grads(lambda *t, a=attn: a(*t, key_padding_mask=mask), q, k, v))
    (out_w, grads_w), (out_s, grads_s) = results
    torch.testing.assert_close(out_s, out_w, rtol=1e-9, atol=1e-11)
    for gs, gw in zip(grads_s, grads_w):
        assert (gs is None) == (gw is None)
        if gs is not None:
            assert torch.isfinite(gs).all()
            torch.testing.assert_close(gs, gw, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize(
    ("dictionary", "normalize", "lam"),
    [("values", False, 0.5), ("keys", False, 0.5), ("values", True, 0.05), ("keys", True, 0.05)],
)
def test_converged_codes_solve_the_lasso(dictionary, normalize, lam):
    d, s = 8, 12
    attn = build_attention(
        "optimization",
        head_dim=d,
        dictionary=dictionary,
        normalize=normalize,
        iterations=3000,
        lam=lam,
    )
    q, k, v = (t.detach() for t in inputs(4, s, seed=5, d=d, dv=d))
    with torch.no_grad():
        z = attn.sparse_codes(q, k, v)  # (B, H, L, S)
        atoms = v if dictionary == "values" else k
        if normalize:
            q, atoms = (t / t.norm(dim=-1, keepdim=True) for t in (q, atoms))
        grad = (q - z @ atoms) @ atoms.transpose(-1, -2)  # rows of Dmᵀ(q − Dm z)
    support = z != 0
    assert support.any() and (~support).any()  # a genuinely sparse, nonempty solution
    # KKT, which the lasso's minimiser alone meets: |Dmᵀ(q − Dm z)| ≤ λ everywhere, = λ·sign(z)
    # on the support. (tests/attention/ops/test_lasso.py: the kernel against FISTA and sklearn.)
    assert (grad.abs() <= lam + 1e-8).all()
    torch.testing.assert_close(grad[support], lam * z[support].sign(), rtol=0, atol=1e-8)


def test_exclude_self_zeroes_the_diagonal_and_prevents_collapse():
    q, _, v = inputs(6, 6, seed=7)
    k = q  # self-attention with tied q and k: each query is one of the atoms of the keys
    options = {"dictionary": "keys", "normalize": True, "iterations": 1000}
    plain = build_attention("optimization", head_dim=D, **options)
    excl = build_attention("optimization", head_dim=D, exclude_self=True, **options)
    with torch.no_grad():
        z_plain, z_excl = plain.sparse_codes(q, k, v), excl.sparse_codes(q, k, v)
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


def test_values_dictionary_needs_the_value_dim_to_be_the_head_dim():
    attn = build_attention("optimization", head_dim=D)
    assert not attn.supports_any_value_dim
    assert build_attention("optimization", head_dim=D, dictionary="keys").supports_any_value_dim
    with pytest.raises(ValueError, match=r"dictionary='values'.*D=4, Dv=3.*dictionary='keys'"):
        attn(*inputs(3, 5))
    with pytest.raises(ValueError, match="D=4, Dv=3"):
        attn.sparse_codes(*inputs(3, 5))


# ---------------------------------------------------------------------- random tokens
def built(seed, **options):
    torch.manual_seed(seed)  # what seed_everything does before the model is built
    return OptimizationAttention(head_dim=D, **options)


def test_random_tokens_are_on_by_default_and_act_only_in_training():
    q, k, v = inputs(5, 6, seed=8, dv=D)
    mask = padding_mask(6)
    noisy = built(0)
    assert noisy.random_tokens == DEFAULT_RANDOM_TOKENS > 0
    clean = built(0, random_tokens=0)
    with torch.no_grad():
        noisy.eval()
        reference = clean(q, k, v, key_padding_mask=mask)
        assert torch.equal(noisy(q, k, v, key_padding_mask=mask), reference)
        assert torch.equal(noisy(q, k, v, key_padding_mask=mask), reference)  # deterministic
        assert int(noisy.draws) == 0  # eval draws none
        noisy.train()
        first = noisy(q, k, v, key_padding_mask=mask)
        second = noisy(q, k, v, key_padding_mask=mask)
        assert int(noisy.draws) == 2
        assert not torch.allclose(first, second)
        assert not torch.allclose(first, reference)
        # Padding stays exact with random atoms in the dictionary (same draw: counter rewound).
        v2 = torch.where(mask[:, None, :, None], v, 1e3)
        noisy.draws.fill_(0)
        torch.testing.assert_close(noisy(q, k, v2, key_padding_mask=mask), first, rtol=0, atol=0)
    clean.train()
    assert torch.equal(clean(q, k, v), clean.eval()(q, k, v))


def test_random_tokens_are_reproducible_across_instances_and_independent_of_the_global_rng():
    atoms = torch.randn(B, H, 6, D, dtype=F64)
    a, b = built(0), built(0)
    assert torch.equal(a.salt, b.salt)
    first = a._random_atoms(atoms, None)
    torch.manual_seed(12345)  # the global RNG plays no part in the draws
    torch.testing.assert_close(b._random_atoms(atoms, None), first, rtol=0, atol=0)
    assert int(a.draws) == int(b.draws) == 1
    assert not torch.allclose(a._random_atoms(atoms, None), first)  # the next draw differs
    # Another instance (another layer, or another seed) draws other tokens at the same count.
    torch.manual_seed(0)
    layers = [OptimizationAttention(head_dim=D) for _ in range(2)]
    assert layers[0].salt != layers[1].salt
    c = built(1)
    assert not torch.allclose(c._random_atoms(atoms, None), first)
    # The salt is drawn whatever R is: turning random tokens off shifts no later initialisation.
    torch.manual_seed(0)
    OptimizationAttention(head_dim=D, random_tokens=0)
    after_off = torch.rand(())
    torch.manual_seed(0)
    OptimizationAttention(head_dim=D)
    assert torch.equal(torch.rand(()), after_off)


def test_random_draws_continue_identically_after_resume():
    q, k, v = inputs(5, 6, seed=9, dv=D)
    run = built(0).train()
    with torch.no_grad():
        run(q, k, v)
        run(q, k, v)
        buffer = io.BytesIO()
        torch.save(copy.deepcopy(run.state_dict()), buffer)  # the checkpoint at step 2
        third = run(q, k, v)
        buffer.seek(0)
        resumed = built(7).train()  # another salt until the checkpoint is loaded
        resumed.load_state_dict(torch.load(buffer, weights_only=True))
        assert int(resumed.draws) == 2 and torch.equal(resumed.salt, run.salt)
        torch.testing.assert_close(resumed(q, k, v), third, rtol=0, atol=0)
    assert set(run.state_dict()) == {"salt", "draws"}
    assert sum(p.numel() for p in run.parameters()) == 0


def test_unnormalized_random_atoms_match_the_dictionary_scale():
    attn = OptimizationAttention(head_dim=8, random_tokens=4000)
    atoms = torch.randn(2, 1, 5, 8, dtype=F64) * torch.tensor([1.0, 30.0], dtype=F64).view(
        2, 1, 1, 1
    )
    mask = torch.ones(2, 5, dtype=torch.bool)
    mask[1, 3:] = False
    atoms = torch.where(mask[:, None, :, None], atoms, 0.0)  # as _codes hands them over
    random = attn._random_atoms(atoms, mask)
    rms_columns = (atoms.square().sum((-1, -2)) / mask.sum(-1).view(2, 1)).sqrt()
    rms_random = random.square().sum(-1).mean(-1).sqrt()
    torch.testing.assert_close(rms_random, rms_columns, rtol=0.05, atol=0)
    assert not random.requires_grad and random.dtype == F64
    unit = OptimizationAttention(head_dim=8, random_tokens=3, normalize=True)
    norms = unit._random_atoms(atoms, mask).norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones_like(norms))


# ---------------------------------------------------------------------- diagnostics
def test_keys_to_carry_ninety_percent_on_a_hand_made_matrix():
    w = torch.tensor(
        [
            [0.5, 0.3, 0.15, 0.05, 0.0],  # .5 + .3 + .15 = .95: 3 keys
            [0.0, 1.0, 0.0, 0.0, 0.0],  # one key carries all
            [0.25, 0.25, 0.25, 0.25, 0.0],  # 4 needed (.75 < .9)
            [-0.6, 0.35, 0.05, 0.0, 0.0],  # signed: |w| counts, .6 + .35 = .95: 2 keys
            [0.0, 0.0, 0.0, 0.0, 0.0],  # an all-zero code: no key carries anything
        ],
        dtype=F64,
    )
    assert keys_to_carry(w).tolist() == [3, 1, 4, 2, 0]
    # Ties at the threshold are not lost to rounding: nine of ten equal weights carry 90 %.
    assert keys_to_carry(torch.full((10,), 0.1)).item() == 9

    attn = OptimizationAttention(head_dim=D)
    assert attn.diagnostics() == {}
    attn._record_sparsity(w.view(1, 1, 5, 5), None)  # zero row left out: mean of 3, 1, 4, 2
    got = attn.diagnostics()
    assert got == pytest.approx({"keys90": 2.5, "keys90_fraction": 0.5})
    mask = torch.tensor([[True, True, True, True, False]])  # 4 real keys
    attn._record_sparsity(w.view(1, 1, 5, 5), mask)
    assert attn.diagnostics() == pytest.approx({"keys90": 2.5, "keys90_fraction": 2.5 / 4})


def test_diagnostics_come_from_training_forwards_only():
    q, k, v = inputs(5, 6, seed=11, dv=D)
    attn = built(0).eval()
    attn(q, k, v)
    assert attn.diagnostics() == {}
    attn.train()
    attn(q, k, v)
    got = attn.diagnostics()
    assert set(got) == {"keys90", "keys90_fraction"}
    assert all(isinstance(x, float) for x in got.values())
    assert 1 <= got["keys90"] <= 6 and got["keys90_fraction"] == pytest.approx(got["keys90"] / 6)
    assert not attn._sparsity.requires_grad


# ---------------------------------------------------------------------- numerics and options
def test_low_precision_inputs_compute_in_float32():
    attn = build_attention("optimization", head_dim=D).eval()  # the same dictionary each call
    q, k, v = (t.detach().float() for t in inputs(4, 5, seed=9, dv=D))
    ref = attn(q, k, v)
    out = attn(q.bfloat16(), k.bfloat16(), v.bfloat16())
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref, rtol=0.1, atol=0.1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = attn(q, k, v)
    assert auto.dtype == torch.float32
    torch.testing.assert_close(auto, ref)


def test_all_zero_codes_give_zero_output_and_finite_grads():
    attn = build_attention("optimization", head_dim=D, lam=100.0, power=0.5)  # λ kills every code
    q, k, v = inputs(3, 4, seed=10, dv=D)
    out = attn(q, k, v)
    assert (out == 0).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, v))


def test_has_no_parameters_and_no_causal_form():
    attn = build_attention("optimization", head_dim=D)
    assert sum(p.numel() for p in attn.parameters()) == 0
    assert not attn.supports_causal and not attn.supports_recurrence
    q, k, v = inputs(4, 4, dv=D)
    with pytest.raises(NotImplementedError, match="optimization"):
        attn(q, k, v, causal=True)
    assert "dictionary='values'" in repr(attn) and "solver='woodbury'" in repr(attn)
    assert (attn.normalize, attn.exclude_self, attn.power) == (False, False, 5.0)


@pytest.mark.parametrize(
    ("option", "match"),
    [
        ({"dictionary": "queries"}, "unknown dictionary 'queries' for .*; allowed: values, keys"),
        ({"iterations": 0}, "iterations must be an int >= 1, got 0"),
        ({"iterations": 2.5}, "iterations must be an int >= 1, got 2.5"),
        ({"lam": -0.1}, "lam must be >= 0, got -0.1"),
        ({"rho": 0.0}, "rho must be > 0, got 0.0"),
        ({"power": -1.0}, "power must be > 0, got -1.0"),
        ({"solver": "cg"}, "unknown solver 'cg' for attention 'optimization'; allowed: woodbury"),
        ({"random_tokens": -2}, "random_tokens must be an int >= 0, got -2"),
        ({"random_tokens": 2.0}, "random_tokens must be an int >= 0, got 2.0"),
    ],
)
def test_bad_options_raise(option, match):
    with pytest.raises(ValueError, match=match):
        build_attention("optimization", head_dim=D, **option)
