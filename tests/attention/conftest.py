"""Which backend configurations the shared contract test runs over.

Every registered name runs with its defaults; ``VARIANTS`` adds option sets that take a
different code path (another feature map, sketch or kernel). A new backend is covered by
registering it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from attn_lightning.attention import available_attentions

VARIANTS: dict[str, list[dict[str, Any]]] = {
    # A fixed M: exact prefixes, padding and step() (the default's M is the call's length).
    "cosformer": [{"horizon": 16}, {"horizon": 16, "implementation": "triton", "chunk_size": 4}],
    "linear": [
        {"feature_map": "relu"},
        {"chunk_size": 3},
        # The fused Triton kernels, run by Triton's CPU interpreter (``triton_interpreter``):
        # elu + 1 inside the kernels' loads, and a map computed outside.
        {"implementation": "triton", "chunk_size": 4},
        {"implementation": "triton", "chunk_size": 4, "feature_map": "relu"},
        # RoFormer's rotary form: turned features in the numerator, positional, self-only.
        {"rotary": True},
        {"rotary": True, "chunk_size": 3},
    ],
    "performer": [
        {"kernel": "hyperbolic", "num_features": 32},
        {"projection": "iid"},
        {"implementation": "triton", "chunk_size": 4, "num_features": 16},
    ],
    "polynomial": [{"learned_coefficients": True}, {"degree": 2}, {"norm": "fixed"}],
    "polysketch": [
        {"sketch_size": 8, "chunk_size": 3},
        # auto takes the (L, S) score form at these short lengths; the feature form explicitly:
        {"sketch_size": 8, "chunk_size": 3, "evaluation": "features"},
        {"learned_coefficients": True, "sketch_size": 8, "evaluation": "features"},
        {"sketch": "learned", "sketch_size": 8},
        {"degree": 2},
        {"learned_coefficients": True, "sketch_size": 8},
        {"local_block": 3, "sketch_size": 8},
        {"local_block": 2, "sketch": "learned", "sketch_size": 8},
    ],
    "optimization": [
        {"iterations": 3, "lam": 0.05},
        # normalize: the svd solver loses float32 precision with large unnormalised columns
        # (see OptimizationAttention), beyond this test's tolerances.
        {"signed": True, "solver": "svd", "normalize": True},
        {"dictionary": "keys"},
        {"normalize": True, "random_tokens": 0},
    ],
    "pool": [{"pool_size": 5, "subtract_input": False}],
    "softmax": [{"window": 3}],  # sliding window: positional, self-attention only
    # feature_dim < D reads a prefix of q and k; auto takes the (L, S) score form at these short
    # lengths, so the feature form (and the fused Triton kernel on its features) explicitly.
    "taylor": [
        {"feature_dim": 3},
        {"feature_dim": 3, "evaluation": "features", "chunk_size": 3},
        {"implementation": "triton", "chunk_size": 4, "feature_dim": 3, "evaluation": "features"},
    ],
}


def interpret_like_the_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TRITON_INTERPRET=1`` for this test, with the interpreter's float32 → bf16 cast rounding to
    nearest even, as the GPU's ``cvt.rn.bf16.f32`` (and torch) do.

    Triton 3.8's interpreter converts through ``_convert_float``, which truncates the mantissa
    (``rounding_mode`` None from every ``.to(tl.bfloat16)``): every bf16 rounding in a kernel then
    errs by up to a whole bf16 step, one-sided, and the bf16 errors measured under the
    interpreter are about twice the compiled kernel's. Patched here for the test's duration.
    """
    from triton.runtime import interpreter

    truncating = interpreter._convert_float

    def convert(data, src, dst, rounding_mode):
        import triton.language as tl

        if src == tl.float32 and dst == tl.bfloat16:
            x = torch.from_numpy(np.ascontiguousarray(data).view(np.float32))
            return x.to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
        return truncating(data, src, dst, rounding_mode)

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(interpreter, "_convert_float", convert)


@pytest.fixture
def interpret(monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's CPU interpreter for this test, rounding as the GPU (``interpret_like_the_gpu``)."""
    interpret_like_the_gpu(monkeypatch)


@pytest.fixture(autouse=True)
def triton_interpreter(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A case with ``implementation: triton`` runs its kernels under ``TRITON_INTERPRET=1`` (CPU
    tensors; set per test so every other test, and a GPU's compiled runs, are untouched)."""
    callspec = getattr(request.node, "callspec", None)
    options = callspec.params.get("options", {}) if callspec is not None else {}
    if isinstance(options, dict) and options.get("implementation") == "triton":
        interpret_like_the_gpu(monkeypatch)


def backend_cases() -> list[Any]:
    cases = []
    for name in available_attentions():
        for options in [{}, *VARIANTS.get(name, [])]:
            label = name + "".join(f"-{k}={v}" for k, v in options.items())
            cases.append(pytest.param(name, options, id=label))
    return cases
