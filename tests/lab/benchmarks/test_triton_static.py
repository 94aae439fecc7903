"""``triton-static``: the Triton causal product's launches compiled for sm_90 on a CPU, with
modelled bytes (no GPU; the compile needs the bundled ptxas)."""

from __future__ import annotations

import pytest
import torch

from lab.benchmark import main
from lab.benchmarks.triton_static import record, roofline, traffic


def test_roofline_is_eight_tensors_read_or_written_once():
    # B 2, H 4, N 32k, D 64, bf16: the 268 MB
    assert roofline(b=2, h=4, n=32768, d=64, dtype=torch.bfloat16) == 8 * 2 * 4 * 32768 * 64 * 2


def test_recorded_launches_and_their_bytes():
    launches, ops = record(b=2, h=4, n=1024, d=64, dtype=torch.bfloat16)
    assert [(x.phase, x.name) for x in launches] == [
        *(("fwd", "states"), ("fwd", "readout")),
        *(("bwd", "states"), ("bwd", "grad_qk")),  # grad_qk forms dV too: F = 64, one tile
    ]
    assert ops["bwd"] == []  # the backward runs no torch kernel between its launches
    readout = next(x for x in launches if x.name == "readout")
    read, written = traffic(readout)
    qkv = 2 * 4 * 1024 * 64 * 2  # one bf16 (B, H, N, D) tensor
    states = 2 * 4 * 16 * 64 * 64 * 4  # float32 (BH, NC, F, E)
    means = 2 * 4 * 16 * 64 * 4  # float32 (BH, NC, E)
    # NC = 16 chunks, B·H = 8 programs: 16 segments of one chunk; their prefix kept for backward
    prefix = states + means  # float32 (BH, NS, F, E) and (BH, NS, F), NS = NC
    final = 2 * 4 * 64 * 64 * 4 + 2 * 4 * 64 * 4  # float32 (B, H, F, E) and (B, H, F)
    # out, den, out − m_c (bf16), the means, the prefix, the final state
    assert written == qkv + 2 * 4 * 1024 * 4 + qkv + means + prefix + final
    assert read >= 3 * qkv + states


def test_a_wide_phi_launches_grad_v_and_grad_qk_writes_no_dv():
    launches, _ = record(b=1, h=2, n=256, d=128, dtype=torch.bfloat16)
    assert [x.name for x in launches if x.phase == "bwd"] == ["states", "grad_qk", "grad_v"]
    grad_qk = next(x for x in launches if x.name == "grad_qk")
    dq_dk = 2 * (1 * 2 * 256 * 128 * 2)  # two bf16 (B, H, N, F) tensors
    assert traffic(grad_qk)[1] == dq_dk


def test_command_prints_kernels_against_the_roofline(capsys):
    try:
        assert main(["triton-static", "--shapes", "1,2,128,32"]) == 0
    except RuntimeError as err:  # the bundled ptxas missing or unusable here
        if "ptxas" in str(err):
            pytest.skip(f"no usable ptxas: {err}")
        raise
    out = capsys.readouterr().out
    assert out.startswith("`python -m lab.benchmark triton-static --shapes 1,2,128,32`")
    assert "| fwd | readout |" in out and "| bwd | grad_qk |" in out
    assert "- fwd: 2 launches" in out and "- bwd: 2 launches" in out and "roofline" in out
    # the default autotuning config's row, and every config's spills (D 32: grad_qk's E tile 32)
    assert "| default config |" in out and "| worst spill B |" in out
    assert "| 8w 1s BE 32 |" in out and "| 2 / 2 | 0 |" in out
