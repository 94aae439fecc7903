"""PolySketch attention against ``naive_polysketch`` (float64, outputs and gradients; the learned
sketch's chunked levels against its whole formula), its features, redraws and options."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import FeatureMapAttention, build_attention
from attn_lightning.attention.naive import naive_bounded, naive_polysketch, naive_random_sketch
from attn_lightning.attention.ops import sketches
from attn_lightning.attention.ops.score_form import EVALUATIONS
from attn_lightning.attention.ops.sketches import LearnedPolySketch
from attn_lightning.attention.polysketch import PolySketchAttention
from tests.attention.parity import (
    CASES,
    DV,
    F64,
    B,
    D,
    H,
    assert_parity,
    assert_steps_match_causal_forward,
    padding_mask,
    qkv,
)


def whole_learned_sketch(sketch: LearnedPolySketch):
    """The learned sketch from its formula and the module's parameters (which get gradients),
    each level whole: the reference of the module's chunked levels."""

    def level(x, ff):
        x = F.layer_norm(x, x.shape[-1:], ff.norm.weight, ff.norm.bias, ff.norm.eps)
        return F.linear(F.gelu(F.linear(x, ff.fc1.weight, ff.fc1.bias)), ff.fc2.weight, ff.fc2.bias)

    def s(x):
        x1 = x2 = x
        for ff1, ff2 in zip(sketch.branch1, sketch.branch2):
            x1, x2 = level(x1, ff1), level(x2, ff2)
        root_r = sketch.sketch_size**0.5
        return torch.tanh(x1 * x2 / root_r) * root_r

    return s


def sketch_of(attn: PolySketchAttention):
    """The map s of ``attn`` for the naive reference: the random sketch from its formula and
    buffers, the learned sketch's formula with whole levels, else identity."""
    if attn.sketch_kind == "learned":
        return whole_learned_sketch(attn.sketch)
    if attn.degree == 4:
        return lambda x: naive_random_sketch(x, attn.sketch.s1, attn.sketch.s2)
    return lambda x: x


def inputs_of(attn: PolySketchAttention):
    """x -> x' of ``attn`` for the naive reference (identity before the learned sketch)."""
    norm = attn.qk_norm
    if norm is None:
        return lambda x: x.to(F64)
    return lambda x: naive_bounded(
        x, normalize=attn.normalize, norm=attn.norm, weight=norm.weight, bias=norm.bias
    )


def randomize(attn: PolySketchAttention) -> None:
    """Move the learnable LN and coefficients off their initial values."""
    g = torch.Generator().manual_seed(42)
    with torch.no_grad():
        if attn.qk_norm is not None and attn.qk_norm.weight is not None:
            attn.qk_norm.weight.mul_(0.5 + torch.rand(D, generator=g, dtype=F64))
            attn.qk_norm.bias.add_(0.2 * torch.randn(D, generator=g, dtype=F64))
        if attn.even_coefficient_logits is not None:
            attn.even_coefficient_logits.add_(
                torch.randn(3, generator=g, dtype=F64)[: len(attn.even_coefficient_logits)]
            )


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize(
    "options",
    [
        {"sketch": "random"},
        {"sketch": "learned"},
        {"sketch": "learned", "sketch_levels": 1, "sketch_bias": True, "norm": "fixed"},
        {"degree": 2},
        {"normalize": False},
        {"norm": "fixed"},
        {"learned_coefficients": True},
        {"learned_coefficients": True, "degree": 2},
    ],
    ids=str,
)
@pytest.mark.parametrize("evaluation", ["features", "kernel"])
def test_matches_naive_float64(case, options, evaluation, monkeypatch):
    # The learned sketch's levels in chunks of 4-5 of the 20-32 rows (B·H·L), not dividing some.
    monkeypatch.setattr(sketches, "CHUNK_ELEMENTS", 8 * 4 * 5)
    l_q, s, causal, padded = CASES[case]
    torch.manual_seed(0)
    attn = build_attention(
        "polysketch", head_dim=D, sketch_size=4, chunk_size=3, evaluation=evaluation, **options
    ).double()
    randomize(attn)
    mask = padding_mask(s) if padded else None
    even = attn.coefficients if attn.learned_coefficients else None
    assert_parity(
        lambda q, k, v: attn(q, k, v, causal=causal, key_padding_mask=mask),
        lambda q, k, v: naive_polysketch(
            q,
            k,
            v,
            sketch_of(attn),
            inputs=inputs_of(attn),
            even_coefficients=even,
            causal=causal,
            key_padding_mask=mask,
        ),
        qkv(l_q, s, seed=4, scale=2.0),
        params=list(attn.parameters()),
    )


def test_paper_defaults_learnable_norm_and_two_level_bias_free_learned_sketch():
    attn = build_attention("polysketch", head_dim=D, sketch_size=4)
    assert sorted(n for n, _ in attn.named_parameters()) == ["qk_norm.bias", "qk_norm.weight"]
    learned = build_attention("polysketch", head_dim=D, sketch="learned", sketch_size=4)
    assert learned.qk_norm is None  # the learned sketch starts with its own LN (paper)
    names = [n for n, _ in learned.named_parameters()]
    assert not any(n.endswith("fc1.bias") or n.endswith("fc2.bias") for n in names)
    assert "sketch.branch1.1.fc2.weight" in names and "sketch.branch2.1.norm.weight" in names
    assert learned.sketch.branch1[1].fc1.in_features == 4  # level 2 maps r -> 8r -> r


def test_learned_even_coefficients_start_at_inverse_factorials_and_are_logged():
    attn = build_attention("polysketch", head_dim=D, sketch_size=4, learned_coefficients=True)
    torch.testing.assert_close(attn.coefficients.detach(), torch.tensor([1.0, 0.5, 1 / 24]))
    assert attn.normalizer_offset == 0.0
    assert attn.diagnostics() == pytest.approx({"a0": 1.0, "a2": 0.5, "a4": 1 / 24, "c": 1.0})
    with torch.no_grad():
        attn.qk_norm.weight.mul_(1.5)  # ⟨q', k'⟩ scaled by 1.5² through the LN scale
    assert attn.diagnostics()["c"] == pytest.approx(2.25)
    assert build_attention("polysketch", head_dim=D, sketch_size=4).diagnostics() == {}
    r, features = 4, attn.features(torch.randn(1, 1, 2, D), is_query=True)
    assert features.shape[-1] == 1 + D * (D + 1) // 2 + r * (r + 1) // 2


@pytest.mark.parametrize("sketch", ["random", "learned"])
def test_features_are_the_symmetric_square_of_the_sketch(sketch):
    r = 5
    attn = build_attention("polysketch", head_dim=D, sketch=sketch, sketch_size=r).double()
    q, k, _ = qkv(4, 6, seed=5)
    sq, sk = attn.sketch(attn.normalize_inputs(q)), attn.sketch(attn.normalize_inputs(k))
    fq, fk = attn.features(q, is_query=True), attn.features(k, is_query=False)
    assert fq.shape == (B, H, 4, r * (r + 1) // 2)
    torch.testing.assert_close(fq @ fk.transpose(-1, -2), (sq @ sk.transpose(-1, -2)) ** 2)


def test_sketch_error_falls_as_sketch_size_grows():
    q, k, v = qkv(6, 10, seed=7)
    exact = build_attention("polynomial", head_dim=D).double()(q, k, v)
    errors = []
    for r in (4, 16, 64, 256):  # relative error ~ 1/√r: 1.0, 0.84, 0.58, 0.32 here
        attn = build_attention("polysketch", head_dim=D, sketch_size=r, redraw=True).double()
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
    sketch = build_attention("polysketch", head_dim=D, degree=2, chunk_size=3).double()
    assert not list(sketch.buffers())
    q, k, v = qkv(l_q, s, seed=8)
    torch.testing.assert_close(
        sketch(q, k, v, causal=causal, key_padding_mask=mask),
        exact(q, k, v, causal=causal, key_padding_mask=mask),
        rtol=1e-10,
        atol=1e-12,
    )


@pytest.mark.parametrize("sketch", ["random", "learned"])
def test_step_matches_causal_forward_with_a_constant_state(sketch):
    attn = build_attention("polysketch", head_dim=D, sketch=sketch, sketch_size=4).double()
    state = assert_steps_match_causal_forward(attn)
    assert [tuple(x.shape) for x in state] == [(B, H, 10, DV), (B, H, 10)]


# ---------------------------------------------------------------------- random features
def test_sketch_is_fixed_unless_redraw_is_asked_for():
    attn = build_attention("polysketch", head_dim=D, sketch_size=6)
    before = attn.sketch.s1.clone()
    attn.redraw_features(torch.Generator().manual_seed(3))  # FeatureRedraw's call: a no-op
    assert torch.equal(attn.sketch.s1, before)


def test_redraw_with_equal_generators_gives_identical_buffers():
    a = build_attention("polysketch", head_dim=D, sketch_size=6, redraw=True)
    b = build_attention("polysketch", head_dim=D, sketch_size=6, redraw=True).double()
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
    c = build_attention("polysketch", head_dim=D, sketch_size=6, redraw=True)
    c.load_state_dict(a.state_dict())
    q, k, v = qkv(3, 4, dtype=torch.float32)
    torch.testing.assert_close(c(q, k, v), a(q, k, v), rtol=0, atol=0)


@pytest.mark.parametrize("options", [{"sketch": "learned", "sketch_size": 4}, {"degree": 2}])
def test_initial_draw_uses_global_rng_and_redraw_is_noop_without_random_features(options):
    torch.manual_seed(11)
    a = build_attention("polysketch", head_dim=D)
    torch.manual_seed(11)
    b = build_attention("polysketch", head_dim=D)
    torch.testing.assert_close(a.sketch.s1, b.sketch.s1, rtol=0, atol=0)
    other = build_attention("polysketch", head_dim=D, **options)
    before = {name: t.clone() for name, t in other.state_dict().items()}
    rng = torch.get_rng_state()
    other.redraw_features(torch.Generator().manual_seed(0))
    other.redraw_features()  # the global RNG is not touched either
    assert torch.equal(torch.get_rng_state(), rng)
    for name, t in other.state_dict().items():
        assert torch.equal(t, before[name])


def test_learned_sketch_runs_with_bfloat16_weights():
    attn = build_attention("polysketch", head_dim=D, sketch="learned", sketch_size=4).bfloat16()
    assert isinstance(attn.sketch, LearnedPolySketch)
    q, k, v = qkv(5, 5, seed=12, dtype=torch.bfloat16)
    out = attn(q, k, v, causal=True)
    assert out.dtype == torch.bfloat16 and torch.isfinite(out).all()


def test_is_a_feature_map_backend():
    attn = build_attention("polysketch", head_dim=D, sketch_size=4)
    assert isinstance(attn, FeatureMapAttention) and attn.normalizer_offset == 1.0
    text = repr(attn)
    for part in ("sketch='random'", "degree=4", "sketch_size=4", "chunk_size=64"):
        assert part in text


# ---------------------------------------------------------------------- options
@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"sketch": "fast"}, "unknown sketch 'fast'.*allowed: random, learned"),
        ({"degree": 3}, "sketch='random' supports degree 2, 4, got degree=3"),
        ({"degree": 6}, "sketch='random' supports degree 2, 4, got degree=6"),
        ({"degree": 4.0}, "sketch='random' supports degree 2, 4, got degree=4.0"),
        ({"sketch": "learned", "degree": 2}, "sketch='learned' supports degree 4, got degree=2"),
        ({"sketch_size": 0}, "sketch_size must be an int >= 1, got 0"),
        ({"chunk_size": 0}, "chunk_size"),
        ({"eps": -1.0}, "eps"),
        ({"sketch": "learned", "learned_coefficients": True}, "learned_coefficients=True needs"),
        ({"norm": "batch"}, "unknown norm 'batch'.*allowed: learned, fixed, none"),
        ({"local_block": -1}, "local_block must be an int >= 0, got -1"),
        ({"sketch": "learned", "sketch_levels": 0}, "sketch_levels must be an int >= 1"),
    ],
    ids=str,
)
def test_bad_options_raise_with_the_allowed_values(options, match):
    with pytest.raises(ValueError, match=match):
        build_attention("polysketch", head_dim=D, **options)


def test_auto_matches_both_forms_and_step_uses_the_features():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 7, D, dtype=torch.float64) for _ in range(3))
    outs = {}
    for evaluation in EVALUATIONS:
        torch.manual_seed(1)
        attn = build_attention("polysketch", head_dim=D, sketch_size=4, evaluation=evaluation)
        outs[evaluation] = attn.double()(q, k, v, causal=True)
    torch.testing.assert_close(outs["features"], outs["kernel"])
    torch.testing.assert_close(outs["auto"], outs["kernel"])
    state, steps = None, []
    for i in range(7):  # decoding: the O(r²·Dv) state, equal to the score form's rows
        out, state = attn.step(q[:, :, i : i + 1], k[:, :, i : i + 1], v[:, :, i : i + 1], state)
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=2), outs["kernel"])


def test_unknown_evaluation_is_named():
    with pytest.raises(ValueError, match=r"unknown evaluation 'dense'.*auto, features, kernel"):
        build_attention("polysketch", head_dim=D, evaluation="dense")
