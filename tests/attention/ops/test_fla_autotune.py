"""``fla_autotune``: the mode read from the environment, which configs ``reduced`` keeps, and
that it trims fla's real autotuners (imported on CPU; no kernel runs)."""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest
import triton  # a dependency of torch's Linux wheels; fla's kernels are Triton
import triton.language as tl

from attn_lightning.attention.ops import fla_autotune


def test_mode_defaults_to_full_and_refuses_an_unknown_value(monkeypatch):
    monkeypatch.delenv(fla_autotune.ENV, raising=False)
    assert fla_autotune.mode() == "full"
    monkeypatch.setenv(fla_autotune.ENV, " reduced ")
    assert fla_autotune.mode() == "reduced"
    monkeypatch.setenv(fla_autotune.ENV, "fast")
    with pytest.raises(ValueError, match=r"ATTN_LIGHTNING_FLA_AUTOTUNE='fast'.*full, reduced"):
        fla_autotune.mode()


def test_keep_takes_four_warps_and_at_most_three_stages():
    config = triton.Config
    assert fla_autotune.keep(config({"BK": 64}, num_warps=4, num_stages=3))
    assert fla_autotune.keep(config({"BK": 32}, num_warps=4, num_stages=2))
    assert not fla_autotune.keep(config({"BK": 64}, num_warps=8, num_stages=2))
    assert not fla_autotune.keep(config({"BK": 64}, num_warps=4, num_stages=4))


def _kernel_module(monkeypatch, configs) -> ModuleType:
    """A module holding heuristics(autotune(jit(f))), as fla's kernels are declared."""

    @triton.heuristics({"USE": lambda args: True})
    @triton.autotune(configs=configs, key=["n"])
    @triton.jit
    def kernel(x, n, USE: tl.constexpr):
        pass

    module = ModuleType("fake_fla_kernels")
    module.kernel = kernel  # type: ignore[attr-defined]
    module.other = 3  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    return module


def test_reduce_configs_trims_an_autotuner_under_heuristics(monkeypatch):
    configs = [
        triton.Config({"B": b}, num_warps=w, num_stages=s)
        for b in (32, 64)
        for w in (2, 4, 8)
        for s in (2, 3, 4)
    ]
    module = _kernel_module(monkeypatch, configs)
    counts = fla_autotune.reduce_configs((module.__name__,))
    (tuner,) = fla_autotune.autotuners(module)
    assert list(counts.values()) == [(18, 4)]
    assert [(c.kwargs["B"], c.num_warps, c.num_stages) for c in tuner.configs] == [
        (32, 4, 2),
        (32, 4, 3),
        (64, 4, 2),
        (64, 4, 3),
    ]


def test_an_autotuner_with_no_kept_config_keeps_its_first(monkeypatch):
    configs = [triton.Config({}, num_warps=8, num_stages=4), triton.Config({}, num_warps=2)]
    module = _kernel_module(monkeypatch, configs)
    assert list(fla_autotune.reduce_configs((module.__name__,)).values()) == [(2, 1)]
    (tuner,) = fla_autotune.autotuners(module)
    assert tuner.configs == configs[:1]


def test_reduced_trims_every_autotuner_of_fla_chunk_linear_attn(monkeypatch):
    tuners = [
        tuner
        for name in fla_autotune.MODULES
        for tuner in fla_autotune.autotuners(importlib.import_module(name))
    ]
    assert len(tuners) >= 4  # the state kernels (fwd, bwd) and the read-out ones
    for tuner in tuners:  # undone after the test: other tests see fla as installed
        monkeypatch.setattr(tuner, "configs", list(tuner.configs))
    before = sum(len(t.configs) for t in tuners)
    counts = fla_autotune.reduce_configs()
    assert set(counts) >= {
        "fla.ops.common.chunk_h.chunk_fwd_kernel_h",
        "fla.ops.common.chunk_h.chunk_bwd_kernel_dh",
    }
    assert counts["fla.ops.common.chunk_h.chunk_fwd_kernel_h"][0] == 48
    after = sum(len(t.configs) for t in tuners)
    assert 0 < after <= before / 3
    for tuner in tuners:
        kept = all(map(fla_autotune.keep, tuner.configs))
        assert tuner.configs and (kept or len(tuner.configs) == 1)


def test_apply_reduces_once_per_process_and_only_when_asked(monkeypatch):
    calls = []
    monkeypatch.setattr(fla_autotune, "reduce_configs", lambda: calls.append(1))
    for value, expected in (("full", []), ("reduced", [1])):
        fla_autotune.apply.cache_clear()
        monkeypatch.setenv(fla_autotune.ENV, value)
        assert fla_autotune.apply() == value
        assert fla_autotune.apply() == value
        assert calls == expected
    fla_autotune.apply.cache_clear()
