"""Pixel model: output distributions vs float64 references, bits/dim, causality, sampling parity."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.attention import available_attentions
from attn_lightning.models.logistic_mixture import DiscretizedLogisticMixture, build_output
from attn_lightning.models.pixel import PixelTransformer, bits_per_dim, sample_pixels
from attn_lightning.models.specs import PixelSpec

LEVELS, N = 11, 12
BACKENDS = [
    ("softmax", {}),
    ("linear", {}),
    ("performer", {"num_features": 16}),
    ("polysketch", {"sketch_size": 4}),
]


def cases():
    return [
        pytest.param(name, opts, id=name + "".join(f"-{v}" for v in opts.values()))
        for name, opts in BACKENDS
        if name in available_attentions()
    ]


def make_model(name="linear", options=None, *, output="categorical", seq_len=N):
    torch.manual_seed(0)
    spec = PixelSpec(d_model=16, num_heads=2, num_layers=2, d_ff=32, output=output, num_mixtures=3)
    model = PixelTransformer(
        spec, levels=LEVELS, seq_len=seq_len, attention={"name": name, **(options or {})}
    )
    return model.double().eval()


def naive_mixture_log_probs(params, levels):
    """p(v) = Σ_k π_k [F_k(c_v + δ) − F_k(c_v − δ)], outer bins to ±∞; float64, from the formula."""
    logits, means, log_scales = params.double().chunk(3, dim=-1)
    scales = log_scales.clamp(min=-7.0).exp()
    weights = logits.softmax(dim=-1)
    delta = 1.0 / (levels - 1)
    probs = []
    for v in range(levels):
        c = -1.0 + 2.0 * v / (levels - 1)
        upper = torch.sigmoid((c + delta - means) / scales) if v < levels - 1 else 1.0
        lower = torch.sigmoid((c - delta - means) / scales) if v > 0 else 0.0
        probs.append((weights * (upper - lower)).sum(dim=-1))
    return torch.stack(probs, dim=-1).log()


def test_logistic_mixture_matches_naive_reference_outputs_and_grads():
    out = DiscretizedLogisticMixture(levels=LEVELS, num_mixtures=4).double()
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 4, generator=g, dtype=torch.float64)
    means = torch.rand(5, 4, generator=g, dtype=torch.float64) * 2 - 1
    # scales in [0.4, 1]: every bin of every component holds > 1e-5, the exact-CDF regime
    log_scales = torch.rand(5, 4, generator=g, dtype=torch.float64) * 0.9 - 0.9
    params = torch.cat([logits, means, log_scales], dim=-1).requires_grad_(True)
    mine, ref = out(params), naive_mixture_log_probs(params, LEVELS)
    torch.testing.assert_close(mine, ref)
    torch.testing.assert_close(mine.exp().sum(-1), torch.ones(5, dtype=torch.float64))
    target = torch.randint(LEVELS, (5, 1), generator=g)
    (g_mine,) = torch.autograd.grad(mine.gather(-1, target).sum(), params)
    (g_ref,) = torch.autograd.grad(ref.gather(-1, target).sum(), params)
    torch.testing.assert_close(g_mine, g_ref)


@pytest.mark.parametrize("output", ["categorical", "logistic_mixture"])
def test_log_prob_equals_the_gathered_distribution_values_and_grads(output):
    # log_prob evaluates the target bin alone; it must be forward() gathered at the target, in
    # every regime: first/last bins, tiny-scale components (the density fallback), wide ones.
    out = build_output(output, levels=LEVELS, num_mixtures=3).double()
    g = torch.Generator().manual_seed(1)
    params = torch.randn(6, 7, out.num_params, generator=g, dtype=torch.float64) * 3
    if output == "logistic_mixture":
        params[..., 6:] = torch.linspace(-9.0, 1.0, 3, dtype=torch.float64)  # log-scales
    params.requires_grad_(True)
    values = torch.randint(LEVELS, (6, 7), generator=g)
    values[0] = 0
    values[1] = LEVELS - 1
    full = out(params).gather(-1, values[..., None])[..., 0]
    target = out.log_prob(params, values)
    torch.testing.assert_close(target, full)
    weights = torch.rand(6, 7, generator=g, dtype=torch.float64)
    (g_full,) = torch.autograd.grad((full * weights).sum(), params)
    (g_target,) = torch.autograd.grad((target * weights).sum(), params)
    torch.testing.assert_close(g_target, g_full)


@pytest.mark.parametrize("output", ["categorical", "logistic_mixture"])
def test_log_likelihood_is_the_forward_distribution_at_the_pixels(output):
    model = make_model(output=output).double()
    pixels = torch.randint(LEVELS, (3, N), generator=torch.Generator().manual_seed(2))
    full = model(model.inputs(pixels)).gather(-1, pixels[..., None])[..., 0]
    torch.testing.assert_close(model.log_likelihood(pixels), full)


def test_logistic_mixture_density_fallback_is_close_for_peaked_components():
    out = DiscretizedLogisticMixture(levels=LEVELS, num_mixtures=2).double()
    # scale e^-3 ≈ 0.05 at -0.9: far bins hold < 1e-5 and use density × bin width instead
    params = torch.tensor([[0.0, 0.0, -0.9, 0.3, -3.0, -1.0]], dtype=torch.float64)
    mine, ref = out(params).exp(), naive_mixture_log_probs(params, LEVELS).exp()
    # only masses below the 1e-5 switch are approximated, so the error stays below it
    torch.testing.assert_close(mine, ref, atol=1e-5, rtol=0.0)
    assert (mine - ref).abs().max() > 0  # the fallback was exercised


def test_logistic_mixture_stays_finite_and_normalised_for_tiny_scales():
    out = DiscretizedLogisticMixture(levels=256, num_mixtures=2)
    params = torch.tensor([[0.0, 0.0, 0.3, -0.9, -20.0, -20.0]])  # log-scale floored at -7
    log_probs = out(params)
    assert torch.isfinite(log_probs).all()
    assert abs(float(log_probs.exp().sum()) - 1.0) < 1e-3


def test_output_errors_name_the_allowed_values():
    with pytest.raises(ValueError, match="categorical, logistic_mixture"):
        build_output("gaussian", levels=4)
    with pytest.raises(ValueError, match="causal"):
        make_model()(torch.zeros(1, 3, dtype=torch.long), causal=False)


@torch.no_grad()
def test_uniform_output_gives_log2_levels_bits_per_dim():
    model = make_model()
    torch.nn.init.zeros_(model.net.head.weight)
    torch.nn.init.zeros_(model.net.head.bias)
    pixels = torch.randint(LEVELS, (3, N))
    bpd = bits_per_dim(model.log_likelihood(pixels))
    assert abs(float(bpd) - math.log2(LEVELS)) < 1e-12
    # bits/dim is −mean log₂ p, checked against a hand computation on random outputs.
    model = make_model()
    log_lik = model.log_likelihood(pixels)
    probs = model(model.inputs(pixels)).exp()
    manual = -sum(
        math.log2(float(probs[b, i, pixels[b, i]])) for b in range(3) for i in range(N)
    ) / (3 * N)
    assert abs(float(bits_per_dim(log_lik)) - manual) < 1e-9


@pytest.mark.parametrize("output", ["categorical", "logistic_mixture"])
def test_likelihood_is_causal_and_step_matches_forward(output):
    model = make_model(output=output)
    pixels = torch.randint(LEVELS, (2, N), generator=torch.Generator().manual_seed(3))
    log_lik = model.log_likelihood(pixels)
    changed = pixels.clone()
    changed[:, 5] = (changed[:, 5] + 1) % LEVELS
    moved = model.log_likelihood(changed)
    torch.testing.assert_close(moved[:, :5], log_lik[:, :5])  # p(x_i | x_<i), i ≤ 5: unchanged
    assert not torch.allclose(moved[:, 6:], log_lik[:, 6:])
    forward = model(model.inputs(pixels))  # (B, N, levels)
    state = None
    for i, token in enumerate(model.inputs(pixels).unbind(dim=1)):
        log_probs, state = model.step(token, state)
        torch.testing.assert_close(log_probs, forward[:, i])


@pytest.mark.parametrize(("name", "options"), cases())
@pytest.mark.parametrize("observed", [0, 5])
def test_seeded_sampling_by_step_equals_prefix_recompute(name, options, observed):
    model = make_model(name, options)
    assert model.supports_recurrence
    pixels = torch.randint(LEVELS, (4, observed), generator=torch.Generator().manual_seed(4))
    draws = {
        method: sample_pixels(
            model,
            observed=pixels,
            temperature=1.3,
            generator=torch.Generator().manual_seed(7),
            method=method,
        )
        for method in ("step", "recompute")
    }
    assert draws["step"].shape == (4, N)
    assert torch.equal(draws["step"][:, :observed], pixels)
    assert torch.equal(draws["step"], draws["recompute"])
    other = sample_pixels(model, observed=pixels, generator=torch.Generator().manual_seed(8))
    assert not torch.equal(other, draws["step"])  # the stream matters: samples are random


def test_mixture_sampling_by_step_equals_prefix_recompute():
    model = make_model(output="logistic_mixture")
    draws = [
        sample_pixels(
            model,
            observed=torch.zeros(3, 2, dtype=torch.long),
            generator=torch.Generator().manual_seed(5),
            method=method,
        )
        for method in ("step", "recompute")
    ]
    assert torch.equal(draws[0], draws[1])


def test_sampling_errors():
    model = make_model()
    with pytest.raises(ValueError, match="observed pixels"):
        sample_pixels(model, observed=torch.zeros(1, N, dtype=torch.long))
    with pytest.raises(ValueError, match="temperature"):
        sample_pixels(model, observed=torch.zeros(1, 0, dtype=torch.long), temperature=0.0)
