"""The race's contenders on the CPU: shapes, fla's op (through fla's own float reference) and
our backends computing the same attention, the normalisers agreeing, CUDA-only ones saying so."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops import dispatch
from lab.benchmarks import contenders as calls
from lab.benchmarks.contenders import Shape
from tests.attention.ops.test_fla import fla_naive

CPU = torch.device("cpu")
SHAPE = Shape(2, 3, 20, 8)


def test_shape_parses_and_prints_bxhxnxd():
    shape = Shape.parse("16x32x1024x128")
    assert shape == Shape(16, 32, 1024, 128) and str(shape) == "16x32x1024x128"
    assert shape.regime == "H 32, D 128, B·N 16,384"
    for bad in ("16x32x1024", "16x32x0x128", "axbxcxd"):
        with pytest.raises(ValueError, match="expected BxHxNxD"):
            Shape.parse(bad)


def test_fla_op_on_its_own_layout_computes_our_linear_attention():
    naive = fla_naive().naive_recurrent_linear_attn
    call = calls.op_call(naive, SHAPE, CPU, torch.float32, normalize=True)
    assert calls.reference_kind("fla-op") == "linear"
    want = calls.reference("linear", SHAPE, CPU, torch.float32)
    torch.testing.assert_close(call.output(), want, rtol=1e-4, atol=1e-5)
    call.run()  # forward + backward on the [B, T, H, ·] leaves
    assert call.kernel == "fla"
    raw = calls.op_call(naive, SHAPE, CPU, torch.float32, normalize=False)
    assert raw.kernel == "fla, normalize=False"
    assert calls.reference_kind("fla-op-raw") is None  # unnormalised: nothing to compare with


@pytest.mark.parametrize("label", ["linear:torch", "linear:auto", "flash"])
def test_our_backends_run_forward_and_backward(label):
    call = calls.CONTENDERS[label][1](SHAPE, CPU, torch.float32)
    call.run()
    out = call.output()
    assert out.shape == (2, 3, 20, 8) and torch.isfinite(out).all()
    if label != "flash":
        want = calls.reference("linear", SHAPE, CPU, torch.float32)
        torch.testing.assert_close(out, want)
    else:
        assert calls.reference_kind(label) is None
    assert calls.CONTENDERS["linear:auto"][1](SHAPE, CPU, torch.float32).kernel == "auto: torch"


def test_the_triton_row_times_the_fused_elu_path(monkeypatch):
    # On CUDA only in a report; here under Triton's interpreter, the same kernels.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(calls, "_need_triton", lambda device: None)
    call = calls.CONTENDERS["linear:triton"][1](SHAPE, CPU, torch.float32)
    assert call.kernel == "triton, elu+1 fused"
    call.run()
    want = calls.reference("linear", SHAPE, CPU, torch.float32)
    torch.testing.assert_close(call.output(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("label", ["fla-op", "fla-op-raw", "linear:fla"])
def test_the_fla_contenders_need_cuda_and_say_so(label):
    with pytest.raises(calls.Unavailable, match="needs CUDA"):
        calls.CONTENDERS[label][1](SHAPE, CPU, torch.float32)


def test_a_kernel_the_registry_does_not_have_is_unavailable_not_an_error(monkeypatch):
    with pytest.raises(calls.Unavailable, match="implementation 'nope' not available"):
        calls.linear("nope")(SHAPE, CPU, torch.float32)


def test_the_old_normaliser_is_the_strided_cumsum_and_the_new_one_agrees():
    phi_q, phi_k = (torch.rand(2, 3, 20, 8, dtype=torch.bfloat16) for _ in range(2))
    want = (phi_q.float() * phi_k.float().cumsum(dim=2)).sum(-1, keepdim=True)
    assert torch.equal(calls.old_normaliser(phi_q, phi_k), want)
    old = calls.normaliser("old")(SHAPE, CPU, torch.bfloat16)
    new = calls.normaliser("new")(SHAPE, CPU, torch.bfloat16)
    got = new.output()
    assert got.shape == (2, 3, 20, 1) and got.dtype == torch.float32
    torch.testing.assert_close(got, old.output(), rtol=1e-5, atol=1e-5)
    new.run()
    old.run()


def test_auto_names_the_kernel_it_resolves_to(monkeypatch):
    monkeypatch.setattr(dispatch, "resolve", lambda *a, **k: "fla")
    call = calls.linear("auto")(SHAPE, CPU, torch.float32)
    assert call.kernel == "auto: fla"


def test_the_triton_row_is_skipped_with_its_reason(monkeypatch):
    # A checkout whose registry lacks "triton": the row names the registry's allowed kernels.
    def unknown(*args, **kwargs):
        raise ValueError("unknown implementation 'triton' for attention 'linear'")

    monkeypatch.setattr(calls, "build_attention", unknown)
    with pytest.raises(calls.Unavailable, match="implementation 'triton' not available: unknown"):
        calls.CONTENDERS["linear:triton"][1](SHAPE, CPU, torch.float32)
    # One that has it: a Triton kernel is timed on CUDA only (the interpreter is for tests).
    monkeypatch.setattr(calls, "build_attention", lambda *a, **k: torch.nn.Identity())
    with pytest.raises(calls.Unavailable, match=r"needs CUDA \(a Triton kernel\)"):
        calls.CONTENDERS["linear:triton"][1](SHAPE, CPU, torch.float32)
