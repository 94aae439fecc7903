"""The contenders ``race`` and ``profile`` time: one causal fwd + bwd each, inputs made outside.

Each contender builds, for one ``Shape`` (B, H, N, D) and dtype, a ``Call``: ``run`` is what is
timed (forward, then backward with a fixed random output gradient), everything else (random
inputs, features, layouts, the module) is made before, outside the timing. ``output`` gives the
forward result for the agreement check (``kernels``). The contenders (``CONTENDERS``):

* ``flash``: our ``softmax`` backend with SDPA forced to its flash kernel (on CUDA);
* ``fla-op``: fla's own ``chunk_linear_attn(scale=1, normalize=True)`` on contiguous
  ``[B, T, H, K]`` ``elu(x) + 1`` features made outside the timing: what a user of fla writes,
  the anchor of every ``linear`` row; ``fla-op-raw`` the same with ``normalize=False`` (the
  kernel our adapter calls, without any normaliser);
* ``linear:torch`` / ``linear:fla`` / ``linear:auto`` / ``linear:triton``: our ``linear``
  backend (``elu + 1``) on each ``implementation`` from ``(B, H, N, D)`` inputs, its contract
  included (a kernel the registry does not know, e.g. ``triton`` in a checkout without it, is
  reported as not available, with the registry's allowed names; ``triton`` needs CUDA, and
  applies elu + 1 inside its loads: raw q, k in, no feature tensor, the kernel column says so);
* ``normaliser:old`` / ``normaliser:new``: the adapter's float32 normaliser
  ``φ(q_i)ᵀΣ_{j≤i}φ(k_j)`` alone, as it was (a cumulative sum over N of a ``(B, H, N, F)``
  tensor: a strided scan, 87 % of the fla path's CUDA time on an H100) and as the adapter
  computes it now (``attention/ops/causal_normaliser.py``: by chunks).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from attn_lightning.attention import build_attention
from attn_lightning.attention.ops import dispatch, fla
from attn_lightning.attention.ops.causal_normaliser import causal_normaliser
from lab.benchmarks.measure import sdpa_context


class Unavailable(Exception):
    """A contender that cannot run here (no CUDA, no fla-core, a kernel not built yet)."""


@dataclass(frozen=True)
class Shape:
    """One attention call's shape: q, k, v are ``(batch, heads, n, head_dim)``."""

    batch: int
    heads: int
    n: int
    head_dim: int

    @classmethod
    def parse(cls, text: str) -> Shape:
        """``"BxHxNxD"``, e.g. ``"16x32x1024x128"``.

        Raises:
            ValueError: not four positive integers joined by ``x``.
        """
        parts = text.lower().split("x")
        if len(parts) != 4 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ValueError(f"shape {text!r}: expected BxHxNxD, four positive integers")
        return cls(*(int(p) for p in parts))

    def __str__(self) -> str:
        return f"{self.batch}x{self.heads}x{self.n}x{self.head_dim}"

    @property
    def regime(self) -> str:
        """The shape's family: H, D and B·N tokens (N varies inside it)."""
        return f"H {self.heads}, D {self.head_dim}, B·N {self.batch * self.n:,}"


@dataclass
class Call:
    """A prepared call: ``run`` (timed), ``output`` (the forward result, for agreement) and the
    kernel that ran (``auto``'s choice, else the contender's own)."""

    run: Callable[[], None]
    output: Callable[[], Tensor]
    kernel: str = ""


Maker = Callable[[Shape, torch.device, torch.dtype], Call]


def _randn(*size: int, device: torch.device, dtype: torch.dtype, seed: int) -> Tensor:
    # Drawn on the device: at H 32, D 128, B·N 16k a tensor is 67M numbers, ~1 s on one CPU core.
    g = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(*size, generator=g, device=device).to(dtype)


def qkv(shape: Shape, device: torch.device, dtype: torch.dtype) -> tuple[Tensor, ...]:
    """Random q, k, v ``(B, H, N, D)`` needing gradients, and an output gradient (seeds 0-3):
    every contender of a shape sees the same numbers."""
    size = (shape.batch, shape.heads, shape.n, shape.head_dim)
    q, k, v = (_randn(*size, device=device, dtype=dtype, seed=s) for s in range(3))
    return (
        q.requires_grad_(),
        k.requires_grad_(),
        v.requires_grad_(),
        _randn(*size, device=device, dtype=dtype, seed=3),
    )


def _backend_call(attn: torch.nn.Module, shape: Shape, device, dtype, kernel: str) -> Call:
    q, k, v, grad = qkv(shape, device, dtype)
    attn = attn.to(device)

    def run() -> None:
        q.grad = k.grad = v.grad = None  # set_to_none, as a training step would
        with sdpa_context("flash" if kernel == "flash" else "auto", device):
            attn(q, k, v, causal=True).backward(grad)

    def output() -> Tensor:
        with torch.no_grad(), sdpa_context("flash" if kernel == "flash" else "auto", device):
            return attn(q, k, v, causal=True)

    return Call(run, output, kernel)


def flash(shape: Shape, device: torch.device, dtype: torch.dtype) -> Call:
    return _backend_call(
        build_attention("softmax", head_dim=shape.head_dim), shape, device, dtype, "flash"
    )


def linear(implementation: str) -> Maker:
    """Our ``linear`` backend on ``implementation``."""

    def make(shape: Shape, device: torch.device, dtype: torch.dtype) -> Call:
        try:
            attn = build_attention("linear", head_dim=shape.head_dim, implementation=implementation)
        except ValueError as err:  # a kernel the registry does not have (yet)
            raise Unavailable(f"implementation {implementation!r} not available: {err}") from err
        if implementation == "fla":
            _need_fla(device)
        if implementation == "triton":
            _need_triton(device)
        kernel = implementation
        if implementation == "triton" and getattr(attn, "fuses_elu_features", False):
            kernel = "triton, elu+1 fused"  # what the row timed: φ in the kernel's loads
        if implementation == "auto":  # what auto takes for a call of this shape
            probe = torch.empty(shape.batch, shape.heads, shape.n, shape.head_dim, device=device)
            kernel = "auto: " + dispatch.resolve("auto", probe.to(dtype), backend="linear")
        return _backend_call(attn, shape, device, dtype, kernel)

    return make


def _need_triton(device: torch.device) -> None:
    # On the CPU Triton runs only under its interpreter (the tests' business): far too slow to
    # time, so the dry run's row says so rather than an error.
    if device.type != "cuda":
        raise Unavailable("needs CUDA (a Triton kernel)")
    if importlib.util.find_spec("triton") is None:
        raise Unavailable("triton is not installed")


def _need_fla(device: torch.device) -> None:
    if device.type != "cuda":
        raise Unavailable("needs CUDA (fla's kernels are Triton)")
    reason = fla.missing_reason()
    if reason:
        raise Unavailable(f"{reason}; {fla.INSTALL}")


def fla_op(*, normalize: bool) -> Maker:
    """fla's ``chunk_linear_attn`` on contiguous ``[B, T, H, ·]`` elu+1 features."""

    def make(shape: Shape, device: torch.device, dtype: torch.dtype) -> Call:
        _need_fla(device)
        return op_call(fla.chunk_op(), shape, device, dtype, normalize=normalize)

    return make


def op_call(
    op: fla.ChunkOp, shape: Shape, device: torch.device, dtype: torch.dtype, *, normalize: bool
) -> Call:
    """``op`` (fla's signature) timed on features and values laid out as fla wants them."""
    q, k, v, grad = (x.detach() for x in qkv(shape, device, dtype))

    def layout(x: Tensor) -> Tensor:  # (B, H, N, ·) -> contiguous [B, T, H, ·]
        return x.transpose(1, 2).contiguous()

    phi_q, phi_k = (layout(F.elu(x) + 1).requires_grad_() for x in (q, k))
    v_t, grad_t = layout(v).requires_grad_(), layout(grad)

    def forward() -> Tensor:
        out, _ = op(phi_q, phi_k, v_t, scale=1.0, normalize=normalize)
        return out

    def run() -> None:
        phi_q.grad = phi_k.grad = v_t.grad = None
        forward().backward(grad_t)

    def output() -> Tensor:
        with torch.no_grad():
            return forward().transpose(1, 2)

    return Call(run, output, "fla" + ("" if normalize else ", normalize=False"))


def old_normaliser(phi_q: Tensor, phi_k: Tensor) -> Tensor:
    """The adapter's normaliser before 2026-11-28: ``(φ(q) · cumsum_N φ(k)).sum(-1)`` in float32,
    the cumulative sum over dim 2 of ``(B, H, N, F)`` (a strided scan on CUDA)."""
    return (phi_q.float() * phi_k.float().cumsum(dim=2)).sum(dim=-1, keepdim=True)


def normaliser(kind: str) -> Maker:
    """The normaliser alone on elu+1 features of the shape (F = D): ``old`` on ``(B, H, N, F)``
    as the adapter ran it, ``new`` as it runs now (``causal_normaliser`` by chunks over the
    tokens of fla's ``[B, T, H, F]`` layout, ``dim=1``). Output ``(B, H, N, 1)`` either way."""

    def make(shape: Shape, device: torch.device, dtype: torch.dtype) -> Call:
        q, k, _, grad = (x.detach() for x in qkv(shape, device, dtype))
        phi_q, phi_k = (F.elu(x) + 1 for x in (q, k))  # (B, H, N, F)
        grad = grad[..., :1].float()
        fn: Callable[[Tensor, Tensor], Tensor] = old_normaliser
        if kind == "new":  # laid out as the adapter gives it, outside the timing
            phi_q, phi_k, grad = (x.transpose(1, 2).contiguous() for x in (phi_q, phi_k, grad))
            fn = functools.partial(causal_normaliser, dim=1)
        phi_q.requires_grad_()
        phi_k.requires_grad_()

        def run() -> None:
            phi_q.grad = phi_k.grad = None
            fn(phi_q, phi_k).backward(grad)

        def output() -> Tensor:
            with torch.no_grad():
                out = fn(phi_q, phi_k)
            return out.transpose(1, 2) if kind == "new" else out

        return Call(run, output, kind)

    return make


# label -> (what it is, maker); the page's rows follow this order.
CONTENDERS: dict[str, tuple[str, Maker]] = {
    "flash": ("softmax, SDPA flash", flash),
    "fla-op": ("fla's chunk_linear_attn, normalize=True (the anchor)", fla_op(normalize=True)),
    "fla-op-raw": ("fla's chunk_linear_attn, normalize=False", fla_op(normalize=False)),
    "linear:fla": ("linear, fla kernel (our adapter)", linear("fla")),
    "linear:torch": ("linear, torch kernel", linear("torch")),
    "linear:auto": ("linear, implementation auto", linear("auto")),
    "linear:triton": ("linear, fused Triton kernel (ours, elu+1 in its loads)", linear("triton")),
    "normaliser:old": ("normaliser, strided cumsum (before)", normaliser("old")),
    "normaliser:new": ("normaliser, by chunks (ops/causal_normaliser.py)", normaliser("new")),
}
LINEAR_OUTPUTS = (
    "fla-op",
    "fla-op-raw",
    "linear:fla",
    "linear:torch",
    "linear:auto",
    "linear:triton",
)


def reference_kind(label: str) -> str | None:
    """Which reference ``label``'s output is compared with: ``linear`` (the float32 torch kernel,
    for the normalised linear rows), ``normaliser`` (the old normaliser), or None (flash and
    fla's unnormalised op compute something else)."""
    if label.startswith("normaliser:"):
        return "normaliser"
    return "linear" if label in LINEAR_OUTPUTS and label != "fla-op-raw" else None


def reference(kind: str, shape: Shape, device: torch.device, dtype: torch.dtype) -> Tensor:
    """The ``reference_kind`` output on the shape's inputs, computed in float32."""
    q, k, v, _ = (x.detach() for x in qkv(shape, device, dtype))
    if kind == "normaliser":
        return old_normaliser(F.elu(q) + 1, F.elu(k) + 1)
    attn = build_attention("linear", head_dim=shape.head_dim, implementation="torch")
    with torch.no_grad():
        return attn.to(device)(q.float(), k.float(), v.float(), causal=True)
