"""The Triton causal product's kernels compile for a GPU (sm_90) on a machine without one.

The interpreter tests run the kernels' code as Python; this compiles what a CUDA call launches
(``benchmarks.triton_static`` records a forward + backward's launches on ``meta`` tensors and
compiles each as ``JITFunction.run`` would on an H100), and checks what only the compiled kernel
shows: every dot on Hopper tensor cores (``wgmma``) for bf16 and fp16, no register spills at the
widths models use, and vector loads at a width that is not a multiple of 16 (the launcher pads
it). Runs under ``TRITON_INTERPRET=1`` too (the compiled set is built without ``triton.jit``).
Whether the compiled kernels are right is ``tests/attention/test_triton_cuda.py``'s.
"""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops.triton_causal_kernels import CONFIGS
from lab.benchmarks.triton_static import compile_launch, record

DOTS = {"states", "readout", "grad_qk", "grad_v"}  # the kernels with a tl.dot


def _compiled(d: int, dtype: torch.dtype, every: bool = False):
    """Each launch of a forward + backward compiled with its default config (``every``: with
    each config the autotuner may time)."""
    # every config at a long N (its ints specialise as the report shapes': multiples of 16)
    launches, _ = record(b=1, h=2, n=16384 if every else 200, d=d, dtype=dtype)
    tuned = [x for launch in launches for x in launch.configs()[: None if every else 1]]
    try:
        return [(launch, compile_launch(launch)) for launch in tuned]
    except RuntimeError as err:  # the bundled ptxas missing or unusable here, not our code
        if "ptxas" in str(err):
            pytest.skip(f"no usable ptxas: {err}")
        raise


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("d", [64, 128])
def test_kernels_compile_for_sm90_on_tensor_cores_without_spills(d, dtype):
    compiled = _compiled(d, dtype, every=True)  # every autotuning config, not only the default
    # φ of one 64-column tile: grad_qk forms dV too; wider, grad_v does
    names = [launch.name for launch, _ in compiled]
    assert list(dict.fromkeys(names)) == [
        *("states", "readout", "grad_qk", *(("grad_v",) if d > 64 else ()))
    ]
    assert names.count("grad_qk") == len(CONFIGS["grad_qk"])  # E ≥ 64: no tile capped away
    for launch, c in compiled:
        assert c.spills == 0, (launch.name, launch.config_name(), c)
        assert (c.wgmma > 0) == (launch.name in DOTS), (launch.name, c)


def test_a_width_off_sixteen_loads_vectors():
    for launch, c in _compiled(40, torch.bfloat16):
        assert c.scalar_loads == 0, (launch.name, c)
        assert c.spills == 0 and (c.wgmma > 0) == (launch.name in DOTS), (launch.name, c)


def test_float32_runs_on_tensor_cores_as_3xtf32():
    for launch, c in _compiled(64, torch.float32):
        assert (c.wgmma > 0) == (launch.name in DOTS), (launch.name, c)
