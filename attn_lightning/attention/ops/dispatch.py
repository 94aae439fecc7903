"""Which kernel a causal feature-map product runs: the one dispatch rule of ``implementation``.

``torch`` (our chunked ``causal_product``), ``fla`` (fla-core's fused kernel, ``ops/fla.py``),
``triton`` (our fused chunk-parallel kernel, ``ops/triton_causal.py``) or ``auto``. ``choose``
states the rule on plain facts (implementation, device, dtype, whether fla is installed);
``resolve`` applies it to a call's values and refuses a kernel that cannot run there, with a
one-line error naming the fix.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.ops import fla

IMPLEMENTATIONS = ("auto", "torch", "fla", "triton")

# Whether ``auto`` runs fla on half-precision CUDA tensors. Off: on the one GPU run so far (H100,
# fla-core 0.6.0) fla's bf16 backward gave a wrong dv for narrow value widths, and at our shapes
# (H = 4) its kernel was slower than the torch kernel (docs/benchmarks.md, "Results: GPU").
# ``auto`` never takes ``triton`` either: it is verified on the CPU under Triton's interpreter
# but not yet timed on a GPU. ``implementation: fla`` / ``triton`` run them as asked.
AUTO_TAKES_FLA = False


def choose(implementation: str, device_type: str, dtype: torch.dtype, *, installed: bool) -> str:
    """The dispatch rule, on plain facts: ``"fla"``, ``"torch"`` or ``"triton"``.

    ``auto`` takes the torch kernel while ``AUTO_TAKES_FLA`` is False; were it True, it would take
    fla for CUDA tensors in bf16/fp16 when fla-core is installed. ``torch``, ``fla`` and
    ``triton`` are taken as asked (``resolve`` checks that they can run).
    """
    if implementation == "auto":
        fla_ok = AUTO_TAKES_FLA and installed
        return "fla" if fla_ok and device_type == "cuda" and dtype in fla.HALF else "torch"
    return implementation


def resolve(implementation: str, v: Tensor, *, backend: str) -> str:
    """``choose`` for a call whose values are ``v``, refusing a kernel that cannot run.

    Raises:
        ValueError: ``fla`` or ``triton`` asked for a tensor that is not on CUDA (``triton``:
            nor on the CPU under ``TRITON_INTERPRET=1``), or a float64 one.
        ModuleNotFoundError: ``fla`` asked for without fla-core (``fla.check_installed``).
    """
    if implementation == "triton":
        # Imported here: Triton loads only for calls that ask for it.
        from attn_lightning.attention.ops.triton_causal import check_runnable

        check_runnable(v, backend=backend)
        return "triton"
    if implementation == "fla":
        if v.device.type != "cuda":
            raise ValueError(
                f"attention {backend!r}: implementation 'fla' runs on CUDA tensors, got a "
                f"{v.device.type} tensor; use implementation: auto (the torch kernel) or torch"
            )
        if v.dtype == torch.float64:
            raise ValueError(
                f"attention {backend!r}: implementation 'fla' has no float64 kernel; use "
                f"implementation: auto or torch for float64"
            )
        fla.check_installed(backend)
        return "fla"
    # Only ``auto`` on a half-precision CUDA tensor needs to know (and the answer is cached).
    installed = implementation == "auto" and v.is_cuda and v.dtype in fla.HALF
    installed = installed and fla.missing_reason() is None
    return choose(implementation, v.device.type, v.dtype, installed=installed)
