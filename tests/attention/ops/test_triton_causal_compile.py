"""The Triton causal product's kernels compile for a GPU (sm_90) on a machine without one.

The interpreter tests run the kernels' code as Python; this catches what only the compiler
rejects (types, shapes, constexpr use) in CI, bf16 (the tensor-core path) with the launcher's
constexprs. Whether the compiled kernels are right is ``tests/attention/test_triton_cuda.py``'s.
"""

from __future__ import annotations

import inspect

import pytest
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from attn_lightning.attention.ops.triton_causal_kernels import kernels

INTS = {"N", "F", "E", "NC", "NE_T", "NF_T"}
HALF = {"q", "k", "v", "a", "b", "grad", "out", "dq", "dk", "dv"}  # in the inputs' dtype
CONSTEXPRS = {"C": 64, "BF": 64, "BE": 64, "SCALED": True, "REVERSE": True, "KEEP": True}
CONSTEXPRS |= {"ELU1": False}
CONSTEXPRS |= {"PREC": "tf32", "DOT": tl.bfloat16}


def _signature(name: str, fn) -> dict[str, str]:
    """Each argument's Triton type as ``triton_causal`` launches ``name`` on bf16 inputs."""
    types = {}
    for arg, param in inspect.signature(fn.fn).parameters.items():
        if "constexpr" in str(param.annotation):
            types[arg] = "constexpr"
        elif arg in INTS:
            types[arg] = "i32"
        elif arg == "shift":
            types[arg] = "fp32"
        elif arg in HALF and not (name == "delta" and arg == "out"):  # delta reads out's fp32 copy
            types[arg] = "*bf16"
        else:
            types[arg] = "*fp32"
    return types


KERNELS = ["states", "prefix", "readout", "delta", "grad_qk", "grad_v"]
ELU1 = ["states", "readout", "grad_qk", "grad_v"]  # the kernels that load q or k


# Each kernel, and (elu1) the variant applying elu + 1 on load, which calls the helpers.
@pytest.mark.parametrize(
    ("name", "elu1"), [(n, False) for n in KERNELS] + [(n, True) for n in ELU1]
)
def test_kernel_compiles_for_sm90_in_bf16(name, elu1):
    fn = getattr(kernels(False), name)
    signature = _signature(name, fn)
    constexprs = {k: v for k, v in CONSTEXPRS.items() if signature.get(k) == "constexpr"}
    if "ELU1" in signature:
        constexprs["ELU1"] = elu1
    assert set(constexprs) == {k for k, v in signature.items() if v == "constexpr"}
    try:
        compiled = triton.compile(
            ASTSource(fn=fn, signature=signature, constexprs=constexprs),
            target=GPUTarget("cuda", 90, 32),
        )
    except RuntimeError as err:  # the bundled ptxas missing or unusable here, not our code
        if "ptxas" in str(err):
            pytest.skip(f"no usable ptxas: {err}")
        raise
    assert compiled.asm["cubin"]
