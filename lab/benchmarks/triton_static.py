"""``triton-static``: our Triton causal product compiled for sm_90 on a CPU, and its modelled bytes.

No GPU is needed. For each shape the launcher (``attention.ops.triton_causal``) runs a forward and
backward on ``meta`` tensors with its kernels replaced by a recorder, so what is recorded is exactly
what a CUDA call launches: each kernel, its grid, its arguments and constexprs. Each distinct launch
is then compiled for sm_90 the way ``JITFunction.run`` would on that GPU (the same argument
specialisation: divisibility by 16, strides of 1), and ``ptxas -v`` reports its registers and
spills. The columns:

* launches per forward and backward, and the torch kernels the launcher runs between them
  (aten ops on the tensors other than allocation and views: the centring means, the casts);
* registers, spill stores (bytes per thread), shared memory (bytes per block) and the number of
  ``wgmma`` (Hopper tensor-core) instructions of each kernel, under its default autotuning config
  (``triton_causal_kernels.CONFIGS``), and how many of the configs the autotuner may time compile
  without spills, with the worst one's spill bytes (``Launch.configs``: every config compiled);
* bytes each kernel reads and writes, modelled from its launch: every tensor argument's size
  times how many programs load each element (``_TRAFFIC``: q and k once per E tile in
  ``readout``, v and dO once per F tile in ``grad_qk``, ...; the per-segment totals, a few hundred
  KB resident in L2, once), against the roofline bytes: q, k,
  v, out, dO, dq, dk, dv each read or written once, ``8·B·H·N·D`` elements.

Example::

    python -m lab.benchmark triton-static --shapes 2,4,32768,64 2,32,16384,128 \\
        2,16,16384,64 --dtypes bfloat16 float16
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attn_lightning.attention.ops import triton_causal
from attn_lightning.attention.ops.triton_causal_kernels import CONFIGS, _clip, kernels
from attn_lightning.records.files import markdown_table

_OPTIONS = ("num_warps", "num_stages")  # launch options, not kernel arguments
NAMES = ("states", "readout", "grad_qk", "grad_v")
# Aten ops that allocate or view: no kernel on a GPU.
_FREE = re.compile(r"^(empty|empty_like|new_empty|empty_strided|view|_unsafe_view|as_strided|"
                   r"t|transpose|slice|select|unsqueeze|squeeze|detach|alias|expand|lift_fresh|"
                   r"_reshape_alias|permute|split|unbind)$")  # fmt: skip


@dataclass(frozen=True)
class Launch:
    """One kernel launch as the launcher made it (``phase``: ``"fwd"`` or ``"bwd"``)."""

    phase: str
    name: str
    grid: tuple[int, ...]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def bound(self) -> dict[str, Any]:
        """The launch's arguments by parameter name."""
        fn = getattr(kernels(False), self.name).fn.fn  # autotuner → JITFunction → function
        kwargs = {k: v for k, v in self.kwargs.items() if k not in _OPTIONS}
        return dict(inspect.signature(fn).bind_partial(*self.args, **kwargs).arguments)

    def configs(self) -> list[Launch]:
        """This launch under each config the autotuner would time (``CONFIGS``, tiles capped by
        the widths as its ``early_config_prune`` does), the default first."""
        named = {k: v for k, v in self.bound().items() if not isinstance(v, torch.Tensor)}
        return [
            Launch(
                self.phase,
                self.name,
                self.grid,
                self.args,
                self.kwargs
                | cfg.kwargs
                | {"num_warps": cfg.num_warps, "num_stages": cfg.num_stages},
            )
            for cfg in _clip(CONFIGS[self.name], named)
        ]

    def config_name(self) -> str:
        """``"8w 3s BF 64"``: the warps, stages and tuned tiles of a ``configs`` launch."""
        kw = self.kwargs
        tiles = [f"{t} {kw[t]}" for t in CONFIGS[self.name][0].kwargs]
        return " ".join([f"{kw['num_warps']}w {kw['num_stages']}s", *tiles])


class _TorchKernels(TorchDispatchMode):
    """The aten ops that run a kernel (not allocations or views), by name."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not _FREE.match(name):
            self.ops.append(name)
        return func(*args, **(kwargs or {}))


def record(
    *, b: int, h: int, n: int, d: int, dtype: torch.dtype, elu: bool = True, chunk: int = 64
) -> tuple[list[Launch], dict[str, list[str]]]:
    """The launches of one forward + backward at ``(b, h, n, d)`` (Dv = D), and the torch ops run
    by the launcher in each phase. ``elu``: φ = elu + 1 fused (``linear``'s default)."""
    launches: list[Launch] = []
    phase = ["fwd"]

    class _Recorder:
        def __getattr__(self, name: str) -> Any:
            return _Indexable(name)

    class _Indexable:
        def __init__(self, name: str) -> None:
            self.name = name

        def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
            return lambda *a, **kw: launches.append(Launch(phase[0], self.name, grid, a, kw))

    q, k, v = (
        torch.empty(b, h, n, d, device="meta", dtype=dtype, requires_grad=True) for _ in range(3)
    )
    ops: dict[str, list[str]] = {}
    with mock.patch.object(triton_causal, "kernels", lambda interpreted: _Recorder()):
        with _TorchKernels() as mode:
            out, _, _ = triton_causal._TritonProduct.apply(q, k, v, 1e-6, chunk, elu)
        ops["fwd"] = mode.ops
        phase[0] = "bwd"
        grad = torch.empty_like(out)
        with _TorchKernels() as mode:
            out.backward(grad)
        ops["bwd"] = mode.ops
    return launches, ops


@dataclass(frozen=True)
class Compiled:
    """What ``ptxas`` and the PTX say of one compiled launch."""

    registers: int
    spills: int
    shared: int
    wgmma: int
    scalar_loads: int  # 16-bit global loads one element at a time (an unaligned half tile)


_COMPILED: dict[str, Compiled] = {}


def _compile(name: str, launch: Launch) -> Compiled:
    """``launch`` compiled for sm_90 as ``JITFunction.run`` would."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = getattr(kernels(False), name).fn  # the autotuner's JITFunction
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, options = binder(*launch.args, **launch.kwargs)
    options, signature, constexprs, attrs = fn._pack_args(
        backend, launch.kwargs, bound, spec, options
    )
    log = io.StringIO()
    knobs = triton.knobs
    with (
        contextlib.redirect_stdout(log),
        knobs.nvidia.scope(),
        knobs.compilation.scope(),
    ):
        knobs.nvidia.dump_ptxas_log = True  # ptxas -v: registers and spills
        knobs.compilation.always_compile = True  # a cache hit would not run ptxas
        compiled = triton.compile(
            ASTSource(fn, signature, constexprs, attrs), target=target, options=options.__dict__
        )
    text = log.getvalue()
    regs = re.search(r"Used (\d+) registers", text)
    spills = re.search(r"(\d+) bytes spill stores", text)
    return Compiled(
        registers=int(regs.group(1)) if regs else -1,
        spills=int(spills.group(1)) if spills else -1,
        shared=int(compiled.metadata.shared),
        wgmma=compiled.asm["ptx"].count("wgmma.mma_async"),
        scalar_loads=len(re.findall(r"ld\.global(?:\.\w+)*\.[bu]16\b", compiled.asm["ptx"])),
    )


def compile_launch(launch: Launch) -> Compiled:
    """``launch`` compiled for sm_90 (cached per kernel, argument types and constexprs)."""
    kinds = [
        (str(a.dtype), a.data_ptr() % 16 == 0) if isinstance(a, torch.Tensor) else
        (type(a).__name__, a == 1, a % 16 == 0) if isinstance(a, int) else type(a).__name__
        for a in launch.args
    ]  # fmt: skip
    key = repr((launch.name, kinds, sorted(launch.kwargs.items(), key=str)))
    if key not in _COMPILED:
        _COMPILED[key] = _compile(launch.name, launch)
    return _COMPILED[key]


# How many programs load each element of an argument, from the launch (nft, net: F and E tiles).
# The segment totals (t, tz, tv, tr, trz: NS per head) are read by every chunk's program (those
# before or after its segment, summed there) but are a few hundred KB in all, resident in L2:
# counted once, at their size (HBM bytes; the L2 reads grow as NC·NS/2 tiles).
_ONCE, _F_TILES, _E_TILES = (lambda nft, net, kw: 1), (lambda nft, net, kw: nft), (
    lambda nft, net, kw: net
)  # fmt: skip
_TRAFFIC: dict[str, dict[str, Callable[[int, int, dict[str, Any]], float]]] = {
    "states": {
        "a": _E_TILES,
        # SCALED: the E-tile-0 programs read dO's other E tiles again for dDen
        "b": lambda nft, net, kw: nft + (nft * (net - 1) / net if kw["SCALED"] else 0),
        "den": lambda nft, net, kw: nft * net if kw["SCALED"] else 0,
        # dDen: the E-tile-0 programs read out (or out − m_c) and the means over every E tile
        **{x: (lambda nft, net, kw: nft if kw["SCALED"] else 0) for x in ("o", "mean")},
    },
    "readout": {
        **{x: _E_TILES for x in ("q", "k", "z")},
        **{x: _ONCE for x in ("v", "s", "t", "tz", "vs", "tv")},  # t, tz, tv: from L2
    },
    "grad_qk": {
        **{x: _ONCE for x in ("q", "k", "s", "r", "z", "rz", "t", "tz", "tr", "trz")},  # L2
        **{x: _F_TILES for x in ("v", "grad", "mean", "den", "gden_c")},
    },
    "grad_v": {
        **{x: _E_TILES for x in ("q", "k", "den")},
        **{x: _ONCE for x in ("r", "tr", "grad")},
    },
}
_WRITES = {
    "states": ("s", "z", "t", "tz", "vs", "tv", "gden_c"),
    "readout": ("out", "den", "resid", "mean", "tp", "tzp", "s_end", "z_end"),
    "grad_qk": ("dq", "dk", "dv"),
    "grad_v": ("dv",),
}


def traffic(launch: Launch) -> tuple[int, int]:
    """Modelled bytes ``(read, written)`` by ``launch`` (module docstring)."""
    args = launch.bound()
    f, e = args.get("F", 1), args.get("E", 1)
    bf, be = args.get("BF", f), args.get("BE", e)
    nft, net = -(-f // bf), -(-e // be)

    def size(name: str) -> int:
        t = args[name]
        return t.numel() * t.element_size()

    read = round(sum(rule(nft, net, args) * size(x) for x, rule in _TRAFFIC[launch.name].items()))
    writes = set(_WRITES[launch.name])
    if launch.name == "readout" and not args["KEEP"]:
        writes.discard("resid")
    if launch.name == "grad_qk" and not args["MERGE_V"]:
        writes.discard("dv")
    if launch.name == "states" and not args["SCALED"]:
        writes.discard("gden_c")
    if not args.get("MEANS", True):
        writes -= {"vs", "tv"}
    return read, sum(size(x) for x in writes)


def roofline(*, b: int, h: int, n: int, d: int, dtype: torch.dtype) -> int:
    """q, k, v, out, dO, dq, dk, dv read or written once: ``8·B·H·N·D`` elements."""
    return 8 * b * h * n * d * torch.empty((), dtype=dtype).element_size()


HEADER = ("phase", "kernel", "grid", "default config", "registers", "spill B", "shared B",
          "wgmma", "read MB", "written MB", "configs without spills", "worst spill B")  # fmt: skip


def _section(shape: tuple[int, int, int, int], dtype: torch.dtype) -> list[str]:
    """One shape and dtype: a row per launch (its default config, and the worst of every config
    the autotuner may pick), then the launch counts and the traffic."""
    b, h, n, d = shape
    launches, ops = record(b=b, h=h, n=n, d=d, dtype=dtype)
    rows, total = [], 0
    for launch in launches:
        tuned = launch.configs()
        every = [compile_launch(x) for x in tuned]
        c = every[0]
        read, wrote = traffic(tuned[0])
        total += read + wrote
        clean = sum(x.spills == 0 for x in every)
        rows.append((launch.phase, launch.name, launch.grid, tuned[0].config_name(), c.registers,
                     c.spills, c.shared, c.wgmma, f"{read / 1e6:.1f}", f"{wrote / 1e6:.1f}",
                     f"{clean} / {len(every)}", max(x.spills for x in every)))  # fmt: skip
    roof = roofline(b=b, h=h, n=n, d=d, dtype=dtype)
    counts = {p: sum(launch.phase == p for launch in launches) for p in ("fwd", "bwd")}
    name = str(dtype).removeprefix("torch.")
    return [
        f"#### B {b}, H {h}, N {n}, D {d}, {name}, elu + 1",
        "",
        markdown_table(HEADER, rows),
        "",
        *(
            f"- {p}: {counts[p]} launches; torch ops between: {len(ops[p])} ({', '.join(ops[p])})"
            for p in ("fwd", "bwd")
        ),
        f"- modelled traffic {total / 1e6:.0f} MB, roofline {roof / 1e6:.0f} MB: "
        f"{total / roof:.2f}×",
        "",
    ]


def report(shapes: list[tuple[int, int, int, int]], dtypes: list[torch.dtype]) -> str:
    """The markdown: per shape and dtype, a row per launch and the totals."""
    return "\n".join(
        line for shape in shapes for dtype in dtypes for line in _section(shape, dtype)
    )


def _shape(text: str) -> tuple[int, int, int, int]:
    parts = text.split(",")
    if len(parts) != 4 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a shape is B,H,N,D (four positive ints), got {text!r}")
    b, h, n, d = (int(p) for p in parts)
    return b, h, n, d


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--shapes", type=_shape, nargs="+", default=[(2, 4, 32768, 64)], help="B,H,N,D"
    )
    parser.add_argument(
        "--dtypes", nargs="+", choices=["bfloat16", "float16", "float32"], default=["bfloat16"]
    )


def run(args: argparse.Namespace) -> str:
    """The report's markdown, headed by the command that regenerates it."""
    dtypes = [getattr(torch, name) for name in args.dtypes]
    return f"`{args.command_line}`\n\n" + report(list(args.shapes), dtypes)
