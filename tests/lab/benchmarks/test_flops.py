"""The FLOP formulas of ``benchmarks.flops``, checked against a measured count.

``torch.utils.flop_counter.FlopCounterMode`` counts the matmuls a forward really runs (mm, bmm,
addmm, baddbmm, SDPA), 2·m·n·k each; every formula's ``matmul`` terms must equal it exactly on a
small call. What the counter cannot see is said where it matters: LAPACK factorisations and
solves (``solve`` terms), and in-place ``baddbmm_`` (the causal chunked kernel's cross-chunk
readout), which torch registers only in its out-of-place form.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from attn_lightning.attention import (
    attention_class,
    attention_options,
    available_attentions,
    build_attention,
)
from lab.benchmarks import flop_count, flops, measure
from lab.benchmarks.flop_count import CallShape
from lab.benchmarks.flops import attention_flops

B, H, D = 2, 3, 8


def _measured(name: str, options: dict, *, length: int, keys: int, causal=False, train=False):
    """FlopCounterMode's total for one forward of backend ``name`` on random inputs."""
    torch.manual_seed(0)
    attn = build_attention(name, head_dim=D, **options).train(train)
    q, k, v = torch.randn(B, H, length, D), torch.randn(B, H, keys, D), torch.randn(B, H, keys, D)
    # SDPA's CPU flash kernel is invisible to the counter; the math path runs the same two
    # products as bmm (it materialises all L·S scores, which is what non-causal counts anyway).
    with (
        FlopCounterMode(display=False) as counter,
        sdpa_kernel([SDPBackend.MATH]),
        torch.no_grad(),
    ):
        attn(q, k, v, causal=causal)
    return counter.get_total_flops()


NON_CAUSAL = [
    ("softmax", {}),
    ("polynomial", {}),
    ("polynomial", {"learned_coefficients": True}),
    ("linear", {}),
    ("mean", {}),
    ("performer", {"num_features": 12}),
    ("performer", {"num_features": 12, "kernel": "hyperbolic"}),
    ("polysketch", {"sketch_size": 6}),
    ("polysketch", {"sketch_size": 6, "evaluation": "features"}),
    ("polysketch", {"sketch_size": 6, "evaluation": "kernel"}),
    ("polysketch", {"learned_coefficients": True, "sketch_size": 6, "evaluation": "features"}),
    ("polysketch", {"sketch": "learned", "sketch_size": 6}),
    ("polysketch", {"sketch": "learned", "sketch_size": 6, "sketch_levels": 1}),
    ("polysketch", {"degree": 2}),
    ("polysketch", {"learned_coefficients": True, "sketch_size": 6}),
    ("polysketch", {"learned_coefficients": True, "degree": 2}),
    ("polysketch", {"local_block": 4, "sketch_size": 6}),
    ("optimization", {}),
    ("optimization", {"solver": "svd"}),
    ("optimization", {"dictionary": "keys", "iterations": 3}),
    ("pool", {}),
    ("taylor", {}),
    ("taylor", {"feature_dim": 3}),
]


@pytest.mark.parametrize(("name", "options"), NON_CAUSAL, ids=str)
@pytest.mark.parametrize(("length", "keys"), [(12, 12), (10, 14), (14, 5)])
def test_matmul_terms_equal_the_measured_count(name, options, length, keys):
    if name == "pool" and length != keys:
        pytest.skip("pool is self-attention only")
    shape = CallShape(B, H, length, keys, D, D)
    count = attention_flops(name, shape, options)
    assert count is not None
    assert count.matmul_total == _measured(name, options, length=length, keys=keys)


@pytest.mark.parametrize("solver", ["woodbury", "svd"])
def test_optimization_in_training_counts_the_random_tokens(solver):
    options = {"solver": solver, "random_tokens": 5, "iterations": 4}
    shape = CallShape(B, H, 10, 14, D, D)
    train = attention_flops("optimization", shape, options, training=True)
    evaluation = attention_flops("optimization", shape, options)
    assert train is not None and evaluation is not None
    assert train.matmul_total == _measured("optimization", options, length=10, keys=14, train=True)
    assert train.total > evaluation.total  # S' = S + R columns in every product but weights·V


def test_optimization_formula_by_hand():
    """K = 10, Woodbury, eval, L = S = N: every term written out."""
    n, d, k = 32, 16, 10
    count = flops.optimization_flops(CallShape(1, 1, n, n, d, d))
    matmul = 2 * n * d * d + 2 * n * n * d + k * 4 * n * n * d + 2 * n * n * d
    assert count.matmul_total == matmul
    assert count.solve == {
        "Cholesky of ρI + DmᵀDm": round(d**3 / 3),
        "Cholesky solve for P": 2 * d * d * n,
    }
    assert count.total == matmul + round(d**3 / 3) + 2 * d * d * n
    # O(K·N²·D): at large N the ADMM products are (4K + 4)/4 = 11× softmax's 4·N²·D.
    big = CallShape(1, 1, 4096, 4096, 64, 64)
    ratio = flops.optimization_flops(big).total / flops.softmax_flops(big).total
    assert 11 < ratio < 11.1


@pytest.mark.parametrize("causal", [False, True])
def test_windowed_softmax_counts_its_blocks(causal):
    # N 200, w 3: blocks of 64 (N padded to 256) against 2 or 3 blocks of keys.
    options = {"window": 3}
    shape = CallShape.self_attention(batch=B, heads=H, n=200, head_dim=D)
    count = attention_flops("softmax", shape, options, causal=causal)
    assert count is not None
    assert count.matmul_total == _measured("softmax", options, length=200, keys=200, causal=causal)
    # Short: SDPA with the band as a mask, every (query, key) pair (the math path materialises
    # all L·S scores).
    short = attention_flops("softmax", CallShape(B, H, 12, 12, D, D), options)
    assert short is not None
    assert short.matmul_total == _measured("softmax", options, length=12, keys=12)


def test_causal_softmax_counts_the_visible_pairs():
    shape = CallShape.self_attention(batch=1, heads=2, n=6, head_dim=4)
    full, causal = flops.softmax_flops(shape), flops.softmax_flops(shape, causal=True)
    assert full.matmul_total == 2 * (2 * 36 * 4 + 2 * 36 * 4)
    assert causal.matmul_total == 2 * (2 * 21 * 4 + 2 * 21 * 4)  # 6·7/2 = 21 pairs
    longer = flops.softmax_flops(CallShape(1, 1, 5, 3, 4, 4), causal=True)
    assert longer.matmul["scores QKᵀ"] == 2 * (1 + 2 + 3 + 3 + 3) * 4


@pytest.mark.parametrize(
    ("name", "options", "n"),
    [
        ("linear", {}, 40),
        ("linear", {"chunk_size": 16}, 40),
        ("mean", {}, 20),
        ("taylor", {"feature_dim": 3, "evaluation": "features"}, 40),
    ],
    ids=str,
)
def test_causal_feature_map_matches_the_counter_but_for_the_in_place_readout(name, options, n):
    count = attention_flops(
        name, CallShape.self_attention(batch=B, heads=H, n=n, head_dim=D), options, causal=True
    )
    assert count is not None
    # The cross-chunk readout runs as an in-place baddbmm_, which FlopCounterMode does not count.
    seen = count.matmul_total - count.matmul["cross-chunk readout Q_c S_{c-1}"]
    assert seen == _measured(name, options, length=n, keys=n, causal=True)


def test_causal_local_polysketch_matches_the_counter():
    options = {"local_block": 4, "sketch_size": 6}
    count = attention_flops("polysketch", CallShape(B, H, 14, 14, D, D), options, causal=True)
    assert count is not None
    assert count.matmul_total == _measured("polysketch", options, length=14, keys=14, causal=True)


def test_feature_dims_agree_with_the_backends():
    for options in ({"num_features": 6}, {"num_features": 6, "kernel": "hyperbolic"}):
        perf = build_attention("performer", head_dim=D, **options)
        assert measure.feature_dim(perf, D) == flops.performer_feature_dim(
            options["num_features"], options.get("kernel", "positive")
        )
    for options in (
        {"sketch_size": 4},
        {"degree": 2},
        {"sketch": "learned", "sketch_size": 4},
        {"learned_coefficients": True, "sketch_size": 4},
    ):
        sketch = build_attention("polysketch", head_dim=D, **options)
        assert measure.feature_dim(sketch, D) == flops.polysketch_features(D, **options)[0]


def test_the_flops_rows_are_the_packages_backends():
    """Every backend the package registers has a row in ``flops.FORMULAS`` and every row is one
    (user backends registered by other tests live outside the package and need none)."""
    ours = {
        name
        for name in available_attentions()
        if attention_class(name).__module__.startswith("attn_lightning.")
    }
    assert ours, "no backend of the package is registered"
    assert not ours - set(flops.FORMULAS), f"no FLOPs row: {sorted(ours - set(flops.FORMULAS))}"
    assert set(flops.FORMULAS) == ours, f"rows of no backend: {sorted(set(flops.FORMULAS) - ours)}"


def test_formula_defaults_are_the_backends_defaults():
    """An option left out means the backend's default, in the formula as in the backend."""
    for name, formula in flops.FORMULAS.items():
        defaults = attention_options(name)
        for param in inspect.signature(formula).parameters.values():
            if param.name in defaults:
                assert param.default == defaults[param.name], (name, param.name)


def test_pool_counts_its_window_sums():
    shape = CallShape.self_attention(batch=1, heads=2, n=12, head_dim=4)
    assert flops.pool_flops(shape).matmul_total == 0
    assert flops.pool_flops(shape).total == 2 * 12 * 4 * 3  # 1-D window of 3
    assert flops.pool_flops(shape, grid=(3, 4), pool_size=3).total == 2 * 12 * 4 * 9
    with pytest.raises(ValueError, match="grid"):
        flops.pool_flops(shape, grid=(5, 5))
    with pytest.raises(ValueError, match="L == S"):
        flops.pool_flops(CallShape(1, 1, 4, 5, 4, 4))


def test_errors_and_unknown_backends():
    shape = CallShape.self_attention(batch=1, heads=1, n=8, head_dim=4)
    with pytest.raises(ValueError, match="no causal form"):
        attention_flops("optimization", shape, causal=True)
    with pytest.raises(ValueError, match="no causal form"):
        attention_flops("pool", shape, causal=True)
    with pytest.raises(ValueError, match="Dv == D"):
        flops.optimization_flops(CallShape(1, 1, 8, 8, 4, 6))
    assert flops.optimization_flops(CallShape(1, 1, 8, 8, 4, 6), dictionary="keys").total > 0
    with pytest.raises(ValueError, match="solver"):
        flops.optimization_flops(shape, solver="qr")
    with pytest.raises(ValueError, match="int >= 1"):
        CallShape(1, 1, 0, 8, 4, 4)
    assert attention_flops("user_backend", shape) is None
    # Options that do not change the count are accepted and ignored.
    assert attention_flops("softmax", shape, {"scale": 0.5, "cache_size": 4}) == (
        flops.softmax_flops(shape)
    )


def test_format_flops():
    assert flop_count.format_flops(1.5e9) == "1.5 GFLOP"
    assert flop_count.format_flops(999) == "999 FLOP"
    assert flop_count.format_flops(None) == "n/a"


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("polynomial", {}),
        ("taylor", {"feature_dim": 3, "evaluation": "kernel"}),
        ("polysketch", {"sketch_size": 6, "evaluation": "kernel"}),
        ("polysketch", {"learned_coefficients": True, "degree": 2, "evaluation": "kernel"}),
    ],
    ids=str,
)
@pytest.mark.parametrize("n", [12, 70])  # one query block (the whole square); three, the last short
def test_causal_score_forms_count_the_tiles_they_compute(name, options, n):
    count = attention_flops(
        name, CallShape.self_attention(batch=B, heads=H, n=n, head_dim=D), options, causal=True
    )
    assert count is not None
    assert count.matmul_total == _measured(name, options, length=n, keys=n, causal=True)


def test_tiled_pairs_skip_the_future_by_query_blocks():
    assert flop_count.tiled_pairs(70, 70, causal=False) == 70 * 70
    assert flop_count.tiled_pairs(32, 32, causal=True) == 32 * 32  # one block: the whole square
    assert flop_count.tiled_pairs(70, 70, causal=True) == 32 * 32 + 32 * 64 + 6 * 70
