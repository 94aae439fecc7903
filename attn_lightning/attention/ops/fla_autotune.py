"""How much Triton autotuning fla's chunk kernels do on their first call: ``full`` or ``reduced``.

fla-core autotunes each chunk kernel over its whole config list the first time it sees a new
(K, V, chunk size, dtype): 48 configs for the state kernels (``chunk_fwd_h``, ``chunk_bwd_dh``),
a handful for the read-out ones, about 115 compilations and timings for one causal fwd+bwd shape.
On a fresh GPU machine (every lease of a benchmark machine, every new container) that is minutes
per shape before the first step, and a report that measures ten shapes in a 15-minute lease
would spend it compiling.

``ATTN_LIGHTNING_FLA_AUTOTUNE=reduced`` keeps, in every autotuner of the modules that
``chunk_linear_attn`` runs (``MODULES``), the configs with 4 warps and at most 3 pipeline stages
(all tile sizes stay): about 4× fewer compilations. The default, ``full``, leaves fla as
installed. The kernels compute the same thing either way; only the chosen tiling can differ,
so a reduced run times fla at most as fast as a full one: a speed-up over SDPA measured with it is
conservative. (A compiler bug that depends on the config would differ too: the first GPU run's
wrong bf16 dv was seen under ``reduced`` only, docs/benchmarks.md "Results: GPU".)
The GPU report (``lab/benchmarks/gpu_report.py``) runs every stage with ``reduced`` unless the
variable is set, fla's own op (the anchor) included, so the adapter-vs-op comparison stays like for
like.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterator
from types import ModuleType
from typing import Any

ENV = "ATTN_LIGHTNING_FLA_AUTOTUNE"
MODES = ("full", "reduced")
# The kernels of ``chunk_linear_attn`` -> ``chunk_simple_gla`` (fla-core 0.5.1 … 0.6.x).
# (``fla.ops.utils.cumsum``: ``normalize=True`` only, as the report's anchor calls it).
MODULES = ("fla.ops.common.chunk_h", "fla.ops.common.chunk_o", "fla.ops.utils.cumsum")
KEEP_WARPS = 4
MAX_STAGES = 3


def mode() -> str:
    """The mode asked for in ``ENV`` (unset or empty: ``full``).

    Raises:
        ValueError: a value that is not one of ``MODES``.
    """
    value = os.environ.get(ENV, "").strip() or "full"
    if value not in MODES:
        raise ValueError(f"{ENV}={value!r} is not a mode; allowed: {', '.join(MODES)}")
    return value


def keep(config: Any) -> bool:
    """Whether a ``triton.Config`` stays under ``reduced``."""
    return config.num_warps == KEEP_WARPS and config.num_stages <= MAX_STAGES


def autotuners(module: ModuleType) -> Iterator[Any]:
    """Every Triton ``Autotuner`` among ``module``'s attributes (under ``heuristics``)."""
    from triton.runtime.autotuner import Autotuner

    seen: set[int] = set()
    for value in vars(module).values():
        fn, depth = value, 0
        while fn is not None and depth < 4:  # heuristics(autotune(jit(f))): a few levels at most
            if isinstance(fn, Autotuner) and id(fn) not in seen:
                seen.add(id(fn))
                yield fn
            fn, depth = getattr(fn, "fn", None), depth + 1


def reduce_configs(modules: tuple[str, ...] = MODULES) -> dict[str, tuple[int, int]]:
    """Trim every autotuner of ``modules`` to the ``keep`` configs (the first config when none
    is kept: an autotuner needs one). Returns ``{kernel: (before, after)}``."""
    counts = {}
    for name in modules:
        for tuner in autotuners(importlib.import_module(name)):
            before = list(tuner.configs)
            tuner.configs = [c for c in before if keep(c)] or before[:1]
            label = getattr(getattr(tuner, "base_fn", None), "__name__", repr(tuner))
            counts[f"{name}.{label}"] = (len(before), len(tuner.configs))
    return counts


@functools.cache
def apply() -> str:
    """Apply ``mode()`` once per process (before fla's first kernel call); return the mode."""
    chosen = mode()
    if chosen == "reduced":
        reduce_configs()
    return chosen
