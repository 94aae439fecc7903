"""The Triton causal product's autotuning: the config sets, the key, the interpreter's default.

Compiled kernels are ``triton.autotune``d over ``CONFIGS`` keyed by ``KEYS`` (whether any config
spills is ``test_triton_causal_compile.py``'s); interpreted ones run the first config, untimed.
"""

from __future__ import annotations

import pytest
import triton

from attn_lightning.attention.ops import triton_causal_kernels as tk

NAMES = ("states", "readout", "grad_qk", "grad_v")


def test_every_kernel_has_configs_and_a_key_of_its_arguments():
    compiled = tk.kernels(False)
    for name in NAMES:
        configs = tk.CONFIGS[name]
        assert configs and len(set(map(str, configs))) == len(configs), name  # no duplicates
        tuner = getattr(compiled, name)
        assert type(tuner).__name__ == "Autotuner", name
        assert tuner.configs == configs and tuner.keys == tk.KEYS[name]
        assert set(tk.KEYS[name]) <= set(tuner.arg_names), name  # a misspelt key is dropped
        assert {"F", "E", "NB"} <= set(tk.KEYS[name])


@pytest.mark.parametrize(
    ("n", "bucket"), [(1, 0), (2, 1), (64, 6), (65, 7), (4097, 13), (8192, 13), (8193, 14)]
)
def test_the_n_bucket_changes_only_when_n_doubles(n, bucket):
    assert tk.n_bucket(n) == bucket


def test_tiles_are_capped_at_the_width_and_duplicates_dropped():
    configs = [
        triton.Config({"BF": 64}, num_warps=8, num_stages=3),
        triton.Config({"BF": 32}, num_warps=8, num_stages=3),
        triton.Config({"BF": 32}, num_warps=4, num_stages=3),
    ]
    wide = tk._clip(configs, {"F": 128})
    assert [(c.kwargs["BF"], c.num_warps) for c in wide] == [(64, 8), (32, 8), (32, 4)]
    # F = 16: both tiles cap to 16, the 8-warp ones become one
    narrow = tk._clip(configs, {"F": 16})
    assert [(c.kwargs["BF"], c.num_warps) for c in narrow] == [(16, 8), (16, 4)]
    assert [c.kwargs["BF"] for c in tk._clip(configs, {"F": 48})] == [64, 32, 32]  # 48 → 64


def test_interpreted_kernels_run_the_default_config_untimed():
    interpreted = tk.kernels(True)
    for name in NAMES:
        kernel = getattr(interpreted, name)
        assert isinstance(kernel, tk._Default), name  # not an Autotuner: it would time on CUDA
        assert kernel.configs is tk.CONFIGS[name]
