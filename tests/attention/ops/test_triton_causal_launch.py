"""The Triton causal product's launcher under Triton's CPU interpreter: strided views read in
place, N = 0, the CUDA device guard, fp16 as fp16.
"""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops import triton_causal
from attn_lightning.attention.ops.triton_causal import (
    _device_guard,
    triton_causal_linear_attention,
)


class _Spy:
    """A kernel set that records each launch's kernel name and arguments, then runs it."""

    def __init__(self, kn, seen: list[tuple[str, tuple]]) -> None:
        self.kn, self.seen = kn, seen

    def __getattr__(self, name: str):
        kn, seen = self.kn, self.seen

        class Launch:
            def __getitem__(self, grid):
                def call(*args, **kw):
                    seen.append((name, args))
                    return getattr(kn, name)[grid](*args, **kw)

                return call

        return Launch()


def _spy(monkeypatch) -> list[tuple[str, tuple]]:
    """Every launch's kernel name and arguments, the launch itself run as usual."""
    seen: list[tuple[str, tuple]] = []
    real = triton_causal.kernels
    monkeypatch.setattr(triton_causal, "kernels", lambda interpreted: _Spy(real(interpreted), seen))
    return seen


def _run(q, k, v, grad, **kw):
    leaves = [t.detach().clone().requires_grad_() if t.is_contiguous() else t for t in (q, k, v)]
    out = triton_causal_linear_attention(*leaves, offset=0.0, eps=1e-6, chunk_size=16, **kw)
    out.backward(grad)
    return out, leaves


@pytest.mark.parametrize("elu", [False, True])
def test_model_layout_views_are_read_in_place(interpret, monkeypatch, elu):
    """q, k, v as the model hands them: ``(B, N, H, D)`` projections transposed to (B, H, N, D)."""
    g = torch.Generator().manual_seed(0)
    b, n, h, d = 2, 37, 3, 16
    base = [torch.rand(b, n, h, d, generator=g) for _ in range(3)]
    grad = torch.randn(b, h, n, d, generator=g)
    want, want_leaves = _run(
        *(x.transpose(1, 2).contiguous() for x in base), grad, elu_features=elu
    )
    leaves = [x.clone().requires_grad_() for x in base]
    views = [x.transpose(1, 2) for x in leaves]  # (B, H, N, D), strides (NHD, D, HD, 1)
    assert not views[0].is_contiguous()
    seen = _spy(monkeypatch)
    out = triton_causal_linear_attention(
        *views, offset=0.0, eps=1e-6, chunk_size=16, elu_features=elu
    )
    out.backward(grad)
    readout = next(args for name, args in seen if name == "readout")
    assert [readout[i].data_ptr() for i in (0, 4, 8)] == [x.data_ptr() for x in leaves]  # no copy
    assert readout[1:4] == views[0].stride()[:3]
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-6)
    for got, ref in zip(leaves, want_leaves):
        torch.testing.assert_close(got.grad.transpose(1, 2), ref.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_empty_sequence_gives_empty_output_and_gradients(interpret, monkeypatch, dtype):
    seen = _spy(monkeypatch)
    q, k, v = (torch.rand(2, 3, 0, 8, dtype=dtype, requires_grad=True) for _ in range(3))
    out, (s, z) = triton_causal_linear_attention(q, k, v, offset=0.0, eps=1e-6, return_state=True)
    assert out.shape == (2, 3, 0, 8) and out.dtype == dtype
    assert torch.equal(s, torch.zeros(2, 3, 8, 8)) and torch.equal(z, torch.zeros(2, 3, 8))
    out.sum().backward()
    assert all(t.grad is not None and t.grad.shape == t.shape for t in (q, k, v))
    assert seen == []  # nothing launched


def test_device_guard_makes_the_tensors_device_current():
    """A ``cuda:1`` tensor's launches run under ``torch.cuda.device(1)`` (no GPU needed to build
    the guard); CPU tensors (the interpreter) get none."""
    guard = _device_guard(torch.device("cuda", 1))
    assert isinstance(guard, torch.cuda.device) and guard.idx == 1
    assert not isinstance(_device_guard(torch.device("cpu")), torch.cuda.device)


def test_float16_runs_as_float16(interpret, monkeypatch):
    seen = _spy(monkeypatch)
    g = torch.Generator().manual_seed(1)
    q, k = (torch.rand(1, 2, 40, 16, generator=g) for _ in range(2))
    v = torch.randn(1, 2, 40, 16, generator=g)
    s = (q.double() @ k.double().transpose(-1, -2)).tril()
    ref = s @ v.double() / (1e-6 + s.sum(-1, keepdim=True))
    out = triton_causal_linear_attention(
        q.half(), k.half(), v.half(), offset=0.0, eps=1e-6, chunk_size=16
    )
    assert out.dtype == torch.float16
    loads = [args[i] for name, args in seen if name == "readout" for i in (0, 4, 8)]
    assert [x.dtype for x in loads] == [torch.float16] * 3  # q, k, v: no float32 copies
    assert ((out.double() - ref).norm() / ref.norm()).item() < 2e-3


# NC = 7 chunks over B·H·tiles = 4 programs: one segment of 7, segments of 4 and 3, 7 of 1.
@pytest.mark.parametrize(("target", "segments"), [(1, (1, 7)), (8, (2, 4)), (264, (7, 1))])
def test_segments_of_any_length_give_the_same_product(interpret, monkeypatch, target, segments):
    monkeypatch.setattr(triton_causal, "TARGET_PROGRAMS", target)
    assert triton_causal._segments(7, 4) == segments
    g = torch.Generator().manual_seed(2)
    q, k = (torch.randn(1, 4, 100, 16, generator=g, dtype=torch.float64) for _ in range(2))
    v = torch.randn(1, 4, 100, 16, generator=g, dtype=torch.float64) + 2.0
    grad = torch.randn(1, 4, 100, 16, generator=g, dtype=torch.float64)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    phi = [torch.nn.functional.elu(x) + 1 for x in leaves[:2]]
    s = (phi[0] @ phi[1].transpose(-1, -2)).tril()
    (s @ leaves[2] / (1e-6 + s.sum(-1, keepdim=True))).backward(grad)
    low = [t.float().requires_grad_() for t in (q, k, v)]
    out, (state, _) = triton_causal_linear_attention(
        *low, offset=0.0, eps=1e-6, chunk_size=16, elu_features=True, return_state=True
    )
    out.backward(grad.float())
    want = s.detach() @ v / (1e-6 + s.detach().sum(-1, keepdim=True))
    torch.testing.assert_close(out.double(), want, rtol=1e-5, atol=1e-5)
    want_state = phi[1].detach().transpose(-1, -2) @ v
    torch.testing.assert_close(state.double(), want_state, rtol=1e-5, atol=1e-4)
    for got, ref in zip(low, leaves):
        torch.testing.assert_close(got.grad.double(), ref.grad, rtol=1e-4, atol=1e-5)
