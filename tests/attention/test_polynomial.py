"""Polynomial attention against naive float64 O(N²) references written here from the formulas."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import build_attention
from attn_lightning.attention.polysketch import symmetric_square

B, H, D, DV = 2, 2, 8, 3
EPS = 1e-6
F64 = torch.float64


def qkv(l_q: int, s: int, *, seed: int = 0, dtype: torch.dtype = F64, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, l_q, D, generator=g, dtype=dtype) * scale
    k = torch.randn(B, H, s, D, generator=g, dtype=dtype) * scale
    v = torch.randn(B, H, s, DV, generator=g, dtype=dtype)
    return q, k, v


def visible(l_q: int, s: int, *, causal: bool, mask: torch.Tensor | None) -> torch.Tensor:
    """(B, 1, L, S) bool: which keys each query may see."""
    out = torch.ones(B, 1, l_q, s, dtype=torch.bool)
    if causal:
        out &= torch.ones(l_q, s, dtype=torch.bool).tril()
    if mask is not None:
        out &= mask[:, None, None, :]
    return out


def prime(x: torch.Tensor, normalize: bool = True) -> torch.Tensor:
    """x' = LN(x)·D^{-1/4}, LN written out: (x − mean) / sqrt(population var + 1e-5)."""
    if normalize:
        mean = x.mean(-1, keepdim=True)
        var = (x - mean).square().mean(-1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + 1e-5)
    return x * D**-0.25


def naive_exact(q, k, v, *, degree, causal, mask, coefficients=None, normalize=True):
    """A_ij = d^p / (1 + Σ_j d^p + eps), or max(0, Σ_i a_i d^i) / (Σ_j ... + eps); d = ⟨q', k'⟩."""
    d = torch.einsum("bhld,bhsd->bhls", prime(q, normalize), prime(k, normalize))
    if coefficients is None:
        sim, offset = d**degree, 1.0
    else:
        sim = sum(a * d**i for i, a in enumerate(coefficients)).clamp_min(0.0)
        offset = 0.0
    sim = torch.where(visible(q.shape[2], k.shape[2], causal=causal, mask=mask), sim, 0.0)
    return torch.einsum("bhls,bhsv->bhlv", sim, v) / (offset + sim.sum(-1, keepdim=True) + EPS)


def naive_features(attn, q, k, v, *, causal, mask):
    """The backend's own φ used quadratically: A = φ(q)φ(k)ᵀ masked, A v / (1 + ΣA + eps)."""
    a = attn.features(q, is_query=True) @ attn.features(k, is_query=False).transpose(-1, -2)
    a = torch.where(visible(q.shape[2], k.shape[2], causal=causal, mask=mask), a, 0.0)
    return a @ v / (1.0 + a.sum(-1, keepdim=True) + EPS)


def padding_mask(s: int) -> torch.Tensor:
    mask = torch.ones(B, s, dtype=torch.bool)
    mask[0, s - 3 :] = False
    mask[1, 1] = False
    return mask


CASES = {  # name -> (l_q, s, causal, padded)
    "noncausal": (5, 7, False, False),
    "causal": (8, 8, True, False),
    "padded": (5, 7, False, True),
    "causal-padded": (8, 8, True, True),
}


def assert_parity(fast, naive, inputs, params=()):
    """Outputs and gradients (a random cotangent) of ``fast`` and ``naive`` agree in float64."""
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    ref_leaves = [t.clone().requires_grad_(True) for t in inputs]
    out = fast(*leaves)
    ref = naive(*ref_leaves)
    torch.testing.assert_close(out, ref, rtol=1e-9, atol=1e-11)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(9), dtype=F64)
    param_grads = torch.autograd.grad(out, [*leaves, *params], cotangent)
    ref_grads = torch.autograd.grad(ref, [*ref_leaves, *params], cotangent)
    for got, want in zip(param_grads, ref_grads):
        assert want.abs().sum() > 0
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------------- exact form
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    "options", [{}, {"degree": 2}, {"degree": 6}, {"normalize": False}], ids=str
)
def test_exact_matches_naive_float64(case, options):
    l_q, s, causal, padded = CASES[case]
    attn = build_attention("polynomial", head_dim=D, **options).double()
    mask = padding_mask(s) if padded else None
    degree, normalize = options.get("degree", 4), options.get("normalize", True)
    assert_parity(
        lambda q, k, v: attn(q, k, v, causal=causal, key_padding_mask=mask),
        lambda q, k, v: naive_exact(
            q, k, v, degree=degree, causal=causal, mask=mask, normalize=normalize
        ),
        qkv(l_q, s, seed=1),
    )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("negative", [False, True], ids=["init", "signed-polynomial"])
def test_learned_coefficients_match_naive_float64(case, negative):
    l_q, s, causal, padded = CASES[case]
    attn = build_attention("polynomial", head_dim=D, learned_coefficients=True).double()
    theta = attn.coefficient_logits
    if negative:  # a_1 dominates: the polynomial is < 0 for d < 0 and the clamp is exercised
        with torch.no_grad():
            theta.copy_(torch.tensor([-4.0, 2.0, -5.0, -6.0, -7.0]))
    mask = padding_mask(s) if padded else None
    inputs = qkv(l_q, s, seed=2)
    if negative:
        d = prime(inputs[0]) @ prime(inputs[1]).transpose(-1, -2)
        poly = sum(a * d**i for i, a in enumerate(F.softplus(theta.detach())))
        assert (poly < 0).any() and (poly > 0).any()
    assert_parity(
        lambda q, k, v: attn(q, k, v, causal=causal, key_padding_mask=mask),
        lambda q, k, v: naive_exact(
            q, k, v, degree=4, causal=causal, mask=mask, coefficients=F.softplus(theta)
        ),
        inputs,
        params=[theta],
    )


def test_learned_coefficients_start_at_inverse_factorials():
    attn = build_attention("polynomial", head_dim=D, degree=6, learned_coefficients=True)
    want = torch.tensor([1 / math.factorial(i) for i in range(7)])
    torch.testing.assert_close(attn.coefficients.detach(), want, rtol=1e-6, atol=0)
    assert "coefficient_logits" in attn.state_dict()
    d = torch.linspace(-3, 3, 13)
    torch.testing.assert_close(attn.kernel(d).detach(), sum(a * d**i for i, a in enumerate(want)))
    plain = build_attention("polynomial", head_dim=D)
    torch.testing.assert_close(plain.coefficients, F.one_hot(torch.tensor(4), 5).float())
    torch.testing.assert_close(plain.kernel(d), d**4)
    assert not list(plain.parameters())


def test_float32_and_half_precision_compute_in_float32():
    attn = build_attention("polynomial", head_dim=D)
    q, k, v = qkv(6, 6, seed=3, dtype=torch.float32)
    ref = naive_exact(q.double(), k.double(), v.double(), degree=4, causal=True, mask=None)
    out = attn(q, k, v, causal=True)
    torch.testing.assert_close(out, ref.float(), rtol=1e-5, atol=1e-6)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(attn(q, k, v, causal=True), out, rtol=0, atol=0)
    half = attn(q.bfloat16(), k.bfloat16(), v.bfloat16(), causal=True)
    assert half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), out, rtol=2e-2, atol=2e-2)


# ---------------------------------------------------------------------- sketch / learned forms
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("form", ["sketch", "learned"])
def test_sketch_forms_match_their_features_used_quadratically(case, form):
    l_q, s, causal, padded = CASES[case]
    torch.manual_seed(0)
    attn = build_attention(
        "polynomial", head_dim=D, form=form, sketch_size=4, chunk_size=3
    ).double()
    mask = padding_mask(s) if padded else None
    assert_parity(
        lambda q, k, v: attn(q, k, v, causal=causal, key_padding_mask=mask),
        lambda q, k, v: naive_features(attn, q, k, v, causal=causal, mask=mask),
        qkv(l_q, s, seed=4, scale=2.0),
        params=list(attn.parameters()),
    )


@pytest.mark.parametrize("form", ["sketch", "learned"])
def test_features_are_the_symmetric_square_of_the_sketch(form):
    r = 5
    attn = build_attention("polynomial", head_dim=D, form=form, sketch_size=r).double()
    q, k, _ = qkv(4, 6, seed=5)
    sq, sk = attn.sketch(attn.normalize_inputs(q)), attn.sketch(attn.normalize_inputs(k))
    fq, fk = attn.features(q, is_query=True), attn.features(k, is_query=False)
    assert fq.shape == (B, H, 4, r * (r + 1) // 2)
    torch.testing.assert_close(fq @ fk.transpose(-1, -2), (sq @ sk.transpose(-1, -2)) ** 2)


def test_symmetric_square_inner_product_equals_full_kronecker():
    g = torch.Generator().manual_seed(6)
    s, t = torch.randn(3, 7, generator=g, dtype=F64), torch.randn(4, 7, generator=g, dtype=F64)
    full_s = (s[:, :, None] * s[:, None, :]).flatten(1)  # (3, 49)
    full_t = (t[:, :, None] * t[:, None, :]).flatten(1)
    compressed = symmetric_square(s) @ symmetric_square(t).T
    assert symmetric_square(s).shape == (3, 28)
    torch.testing.assert_close(compressed, full_s @ full_t.T, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(compressed, (s @ t.T) ** 2, rtol=1e-12, atol=1e-12)


def test_sketch_error_falls_as_sketch_size_grows():
    q, k, v = qkv(6, 10, seed=7)
    exact = build_attention("polynomial", head_dim=D).double()(q, k, v)
    errors = []
    for r in (4, 16, 64, 256):  # relative error ~ 1/√r: 1.0, 0.84, 0.58, 0.32 here
        attn = build_attention("polynomial", head_dim=D, form="sketch", sketch_size=r).double()
        g = torch.Generator().manual_seed(r)
        draws = []
        for _ in range(8):
            attn.redraw_features(g)
            draws.append((attn(q, k, v) - exact).norm() / exact.norm())
        errors.append(torch.stack(draws).mean().item())
    assert errors[0] > errors[1] > errors[2] > errors[3]
    assert errors[3] < errors[0] / 2


@pytest.mark.parametrize("case", CASES)
def test_degree_two_sketch_equals_exact(case):
    l_q, s, causal, padded = CASES[case]
    mask = padding_mask(s) if padded else None
    exact = build_attention("polynomial", head_dim=D, degree=2).double()
    sketch = build_attention(
        "polynomial", head_dim=D, degree=2, form="sketch", chunk_size=3
    ).double()
    assert not list(sketch.buffers()) and not list(sketch.parameters())
    q, k, v = qkv(l_q, s, seed=8)
    torch.testing.assert_close(
        sketch(q, k, v, causal=causal, key_padding_mask=mask),
        exact(q, k, v, causal=causal, key_padding_mask=mask),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize(
    ("options", "state_shapes"),
    [
        ({}, [(B, H, 3, D), (B, H, 3, DV)]),
        ({"form": "sketch", "sketch_size": 4}, [(B, H, 10, DV), (B, H, 10)]),
    ],
    ids=["exact-kv-cache", "sketch-constant-state"],
)
def test_step_state(options, state_shapes):
    attn = build_attention("polynomial", head_dim=D, **options).double()
    q, k, v = qkv(3, 3, seed=10)
    full = attn(q, k, v, causal=True)
    state = None
    for t in range(3):
        out, state = attn.step(q[:, :, t : t + 1], k[:, :, t : t + 1], v[:, :, t : t + 1], state)
        torch.testing.assert_close(out, full[:, :, t : t + 1], rtol=1e-10, atol=1e-12)
    assert [tuple(x.shape) for x in state] == state_shapes


# ---------------------------------------------------------------------- random features
def test_redraw_with_equal_generators_gives_identical_buffers():
    a = build_attention("polynomial", head_dim=D, form="sketch", sketch_size=6)
    b = build_attention("polynomial", head_dim=D, form="sketch", sketch_size=6).double()
    assert {"sketch.s1", "sketch.s2"} <= set(a.state_dict())
    assert not torch.equal(a.sketch.s1, b.sketch.s1.float())  # global RNG moved on
    a.redraw_features(torch.Generator().manual_seed(3))
    b.redraw_features(torch.Generator().manual_seed(3))
    assert b.sketch.s1.dtype == F64  # redraw keeps the buffer's dtype
    torch.testing.assert_close(a.sketch.s1, b.sketch.s1.float(), rtol=0, atol=0)
    torch.testing.assert_close(a.sketch.s2, b.sketch.s2.float(), rtol=0, atol=0)
    assert not torch.equal(a.sketch.s1, a.sketch.s2)
    before = a.sketch.s1.clone()
    a.redraw_features(torch.Generator().manual_seed(4))
    assert not torch.equal(a.sketch.s1, before)
    c = build_attention("polynomial", head_dim=D, form="sketch", sketch_size=6)
    c.load_state_dict(a.state_dict())
    q, k, v = qkv(3, 4, dtype=torch.float32)
    torch.testing.assert_close(c(q, k, v), a(q, k, v), rtol=0, atol=0)


def test_initial_draw_uses_global_rng_and_redraw_is_noop_without_random_features():
    torch.manual_seed(11)
    a = build_attention("polynomial", head_dim=D, form="sketch")
    torch.manual_seed(11)
    b = build_attention("polynomial", head_dim=D, form="sketch")
    torch.testing.assert_close(a.sketch.s1, b.sketch.s1, rtol=0, atol=0)
    learned = build_attention("polynomial", head_dim=D, form="learned", sketch_size=4)
    before = {name: t.clone() for name, t in learned.state_dict().items()}
    learned.redraw_features(torch.Generator().manual_seed(0))
    for name, t in learned.state_dict().items():
        assert torch.equal(t, before[name])


def test_learned_sketch_runs_with_bfloat16_weights():
    attn = build_attention("polynomial", head_dim=D, form="learned", sketch_size=4).bfloat16()
    q, k, v = qkv(5, 5, seed=12, dtype=torch.bfloat16)
    out = attn(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


# ---------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"form": "fast"}, "unknown form 'fast'.*allowed: exact, sketch, learned"),
        ({"degree": 3}, r"degree must be an even int >= 2 .*got 3"),
        ({"degree": 0}, r"degree must be an even int >= 2 .*got 0"),
        ({"form": "sketch", "degree": 6}, "form='sketch' supports degree 2, 4, got degree=6"),
        ({"form": "learned", "degree": 2}, "form='learned' supports degree 4, got degree=2"),
        ({"form": "sketch", "learned_coefficients": True}, "allowed forms: exact.*'sketch'"),
        ({"form": "learned", "learned_coefficients": True}, "allowed forms: exact.*'learned'"),
        ({"sketch_size": 0}, "sketch_size must be a positive int.*got 0"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"eps": -1.0}, "eps"),
    ],
    ids=str,
)
def test_bad_options_raise_with_the_allowed_values(options, match):
    with pytest.raises(ValueError, match=match):
        build_attention("polynomial", head_dim=D, **options)
