"""Pure helpers of the benchmark suite: spec parsing, tables, CSV provenance, measures, math."""

from __future__ import annotations

import math
import time

import pytest
import torch
import torch.nn.functional as F

from attn_lightning.attention import build_attention
from lab.benchmarks import approximation as approx
from lab.benchmarks import decode, kernel_shapes, measure, report, scaling
from lab.benchmarks.measure import parse_backend


# ---------------------------------------------------------------------------- specs
def test_parse_backend_types_and_label():
    spec = parse_backend("performer:num_features=128,kernel=hyperbolic,eps=1e-5")
    assert spec.name == "performer"
    assert spec.label == "performer:num_features=128,kernel=hyperbolic,eps=1e-5"
    assert spec.options == {"num_features": 128, "kernel": "hyperbolic", "eps": 1e-5}
    assert isinstance(spec.options["num_features"], int)
    assert parse_backend("softmax").options == {}
    attn = parse_backend("polysketch:sketch=learned,sketch_size=8").build(head_dim=16)
    assert (attn.name, attn.sketch_kind, attn.sketch_size) == ("polysketch", "learned", 8)


def test_parse_backend_refuses_the_retired_polynomial_form_option():
    with pytest.raises(ValueError, match=r"unknown option 'form' for backend 'polynomial'"):
        parse_backend("polynomial:form=exact")


def test_parse_backend_unknown_name_lists_available():
    with pytest.raises(ValueError, match=r"unknown backend 'nope'.*available: .*softmax"):
        parse_backend("nope:x=1")


def test_parse_backend_unknown_option_lists_allowed():
    with pytest.raises(ValueError, match=r"unknown option 'features'.*allowed: .*num_features"):
        parse_backend("performer:features=3")


def test_parse_backend_malformed_item():
    with pytest.raises(ValueError, match="expected key=value"):
        parse_backend("linear:feature_map")


# ---------------------------------------------------------------------------- tables
def _row(backend, causal, n, ms, **kw):
    return scaling.Row(
        "p",
        backend,
        causal,
        "fwd",
        n,
        2,
        1,
        8,
        "float32",
        ms=ms,
        ms_per_sample=None if ms is None else ms / 2,
        **kw,
    )


def test_scaling_table_speedup_gflops_and_skips():
    rows = [
        _row("softmax", False, 64, 4.0, peak_mb=1.0),
        _row("softmax", False, 128, None, est_ms=16.0, note="too slow (est. 0.016 s/call)"),
        _row("linear", False, 64, 2.0, gflops=12.3, peak_mb=0.5),
        _row("linear", False, 128, None, note="OOM"),
    ]
    table = report.scaling_table(rows, mode="fwd", value="ms").splitlines()
    assert table[0] == "| backend | mask | N=64 | N=128 |"
    assert table[2] == "| softmax | full | 4 | too slow (est. 16) |"
    assert table[3] == "| linear | full | 2 (2×) [12 GF/s] | OOM |"
    per_sample = report.scaling_table(rows, mode="fwd", value="ms_per_sample").splitlines()
    assert per_sample[2] == "| softmax | full | 2 | too slow (est. 8) |"
    memory = report.scaling_table(rows, mode="fwd", value="peak_mb").splitlines()
    assert memory[2:] == ["| softmax | full | 1 | – |", "| linear | full | 0.5 | OOM |"]
    assert report.scaling_table(rows, mode="fwdbwd").count("\n") == 1  # header only


# ---------------------------------------------------------------------------- measures
def test_cpu_peak_bytes_sees_a_transient_allocation():
    def fn():
        big = torch.empty(1 << 20, dtype=torch.float32)  # 4 MiB, freed on return
        big.fill_(1.0)

    peak = measure.cpu_peak_bytes(fn)
    assert peak is not None and 4 << 20 <= peak < 5 << 20


def test_timed_point_stops_at_the_budget():
    calls = []
    seconds, count = measure.timed_point(
        lambda: (calls.append(1), time.sleep(0.02)),
        repeats=5,
        warmup=3,
        budget_s=0.01,
        device=torch.device("cpu"),
    )
    assert count == 1 and len(calls) == 3 + 1 and seconds >= 0.02  # warm-up untimed, then one


def test_feature_dim_and_minimal_flops():
    assert measure.feature_dim(build_attention("linear", head_dim=8), 8) == 8
    perf = build_attention("performer", head_dim=8, num_features=6, kernel="hyperbolic")
    assert measure.feature_dim(perf, 8) == 12
    assert measure.feature_dim(build_attention("polynomial", head_dim=8), 8) is None
    sketch = build_attention("polysketch", head_dim=8, sketch_size=4)
    assert measure.feature_dim(sketch, 8) == 4 * 5 // 2
    assert measure.feature_dim(build_attention("softmax", head_dim=8), 8) is None
    assert measure.minimal_flops(8, batch=2, heads=3, n=10, dv=4, mode="fwd") == 4 * 10 * 8 * 4 * 6
    assert measure.minimal_flops(8, batch=1, heads=1, n=10, dv=4, mode="fwdbwd") == 12 * 10 * 8 * 4
    assert measure.minimal_flops(None, batch=1, heads=1, n=10, dv=4, mode="fwd") is None


def test_prefill_state_is_a_feature_state_or_a_kv_cache():
    shape, cpu = (1, 2, 1, 8), torch.device("cpu")
    sketch = build_attention("polysketch", head_dim=8, sketch_size=4)
    s, z = decode.prefill_state(sketch, 5, shape, cpu)
    assert (tuple(s.shape), tuple(z.shape)) == ((1, 2, 10, 8), (1, 2, 10))
    k, v = decode.prefill_state(build_attention("polynomial", head_dim=8), 5, shape, cpu)
    assert tuple(k.shape) == tuple(v.shape) == (1, 2, 5, 8)


def test_sdpa_context_rejects_unknown_kernel():
    with pytest.raises(ValueError, match="allowed: auto, flash"):
        measure.sdpa_context("fast", torch.device("cpu"))


def test_protocol_batches():
    constant = scaling.PROTOCOLS["constant-tokens"]
    assert [constant.batch_for(n) * n for n in constant.lengths] == [2**16] * 8
    assert scaling.PROTOCOLS["fixed-batch"].batch_for(6000) == 32


def test_estimate_carries_the_per_sample_growth_of_the_last_two_points():
    def r(n, ms, mb=None, batch=1):
        return scaling.Row("p", "x", False, "fwd", n, batch, 1, 8, "float32", ms=ms, peak_mb=mb)

    assert scaling._estimate([r(8, 1.0)], 16, 1, "ms") == 4.0  # one point: the quadratic bound
    assert scaling._estimate([r(8, 1.0), r(16, 2.9)], 32, 1, "ms") == pytest.approx(2.9**2)
    # constant tokens: half the batch at twice N and the same total time is linear per sample
    halving = [r(8, 1.0, batch=4), r(16, 1.0, batch=2)]
    assert scaling._estimate(halving, 32, 1, "ms") == pytest.approx(1.0)
    # A linear-time backend's memory: 289 -> 1142 MiB from N = 1,024 to 4,096 is N¹, so the
    # estimate at 16,384 is ~4.5 GiB, not the quadratic bound's 18 GiB.
    rows = [r(1024, 1.0, 289.0, 4), r(4096, 1.0, 1142.0, 4)]
    assert scaling._estimate(rows, 16384, 4, "peak_mb") == pytest.approx(4568, rel=0.05)
    quadratic = [r(1024, 1.0, 10.0), r(2048, 1.0, 40.0)]
    assert scaling._estimate(quadratic, 4096, 1, "peak_mb") == pytest.approx(160.0)


def test_series_skips_once_the_estimate_exceeds_the_budget():
    settings = scaling.Settings(
        device=torch.device("cpu"),
        dtype=torch.float32,
        repeats=1,
        warmup=1,
        budget_s=0.0,
        measure_memory=False,
    )
    protocol = scaling.TimingProtocol("t", (8, 16, 32), heads=1, head_dim=8, batch=1)
    spec = parse_backend("softmax")
    rows = scaling.run_series(
        spec,
        spec.build(head_dim=8),
        causal=False,
        mode="fwd",
        protocol=protocol,
        settings=settings,
        dtype_name="float32",
    )
    assert rows[0].ms is not None and rows[0].note == "1 run (over budget)"
    assert [r.ms for r in rows[1:]] == [None, None]
    # Upper-bound extrapolation (N/N₀)²·(B/B₀) from the last measured point.
    assert rows[2].est_ms == pytest.approx(rows[0].ms * 16)
    assert rows[2].note.startswith("too slow")


# ---------------------------------------------------------------------------- approximation
def test_error_row_is_zero_for_an_exact_pair_and_positive_otherwise():
    settings = approx.ApproxSettings(length=8, heads=1, head_dim=4, draws=3)
    exact = approx.error_row(
        "t", "s", "polysketch:degree=2", "polynomial:degree=2", "x", 1, settings
    )
    assert exact.mean < 1e-10 and exact.draws == 3  # degree-2 "sketch" is the exact feature map
    noisy = approx.error_row("t", "s", "performer:num_features=4", "softmax", "x", 1, settings)
    assert noisy.min > 0 and noisy.min <= noisy.mean <= noisy.max and noisy.std > 0


# ---------------------------------------------------------------------------- kernel shapes
def test_learned_coefficients_from_a_lightning_checkpoint(tmp_path):
    logits = torch.tensor([0.0, 1.0, -1.0])
    state = {"model.blocks.0.attn.attention.coefficient_logits": logits, "other.weight": logits}
    torch.save({"state_dict": state, "epoch": 3}, tmp_path / "a.ckpt")
    found = kernel_shapes.load_learned_coefficients(tmp_path / "a.ckpt")
    assert list(found) == ["model.blocks.0.attn.attention"]
    torch.testing.assert_close(found["model.blocks.0.attn.attention"], F.softplus(logits.double()))
    torch.save({"state_dict": {"other.weight": logits}}, tmp_path / "b.ckpt")
    with pytest.raises(ValueError, match="coefficient_logits"):
        kernel_shapes.load_learned_coefficients(tmp_path / "b.ckpt")


def test_kernel_curves_are_normalised_at_zero_and_exact_where_closed_form():
    curves = kernel_shapes.kernel_curves(dim=8, pairs=4, points=5, num_features=8)
    by_label = {c["label"]: c for c in curves}
    theta = torch.linspace(0, math.pi, 5, dtype=torch.float64)
    expected_exp = (theta.cos() - 1).exp()
    torch.testing.assert_close(
        torch.tensor(by_label["exp(xᵀy)  (softmax)"]["y"], dtype=torch.float64), expected_exp
    )
    power = by_label["(xᵀy)^4  (power kernel)"]["y"]
    assert power[0] == pytest.approx(1) and power[2] == 0 and power[4] == pytest.approx(1)
    for c in curves:
        if not c["label"].startswith("Performer"):  # an estimate: equal to 1 only on average
            assert c["y"][0] == pytest.approx(1.0)
    taylor = kernel_shapes.polynomial(
        kernel_shapes.taylor_coefficients(4), torch.tensor([1.0], dtype=torch.float64)
    )
    assert taylor.item() == pytest.approx(1 + 1 + 1 / 2 + 1 / 6 + 1 / 24)


def test_decode_steps_the_state_each_call_returned():
    attn = build_attention("softmax", head_dim=8)
    shape, cpu = (1, 2, 1, 8), torch.device("cpu")
    state = decode.prefill_state(attn, 5, shape, cpu, room=4)
    seen: list[int] = []
    real_step = attn.step

    def recording_step(q, k, v, state):
        seen.append(state[0].shape[2])
        return real_step(q, k, v, state)

    attn.step = recording_step  # type: ignore[method-assign]
    step = decode.chained_step(attn, torch.randn(shape), state)
    with torch.no_grad():
        for _ in range(3):
            step()
    assert seen == [5, 6, 7]  # a decoder's chain, not the same prefix re-stepped
