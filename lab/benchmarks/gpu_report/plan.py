"""What the GPU report runs, in order of value, each stage with its estimated cost and timeout.

The stages of ``cuda_plan`` (bf16, causal forward + backward, CUDA events):

0. In each stage that times kernels (``anchor``, ``kernels``, ``normaliser``, ``kernels-64k``),
   first: the device's copy bandwidth (``bandwidth``: a timed large device-to-device copy,
   measured once per report, the page's roofline).
1. ``anchor``: fla's own ``chunk_linear_attn`` (``calls``: features made outside the timing,
   normalize=True, and the raw kernel) at every shape of ``SHAPES``. First, because a report
   without it cannot judge our fla path (the 2026-11-26 run killed it), and because it pays fla's
   first-call autotuning, whose results Triton can keep on disk for the stages after it (fla
   asks it to: ``FLA_CACHE_RESULTS``).
2. ``kernels``: SDPA flash and ``linear`` on each kernel (fla, torch, auto, triton; a kernel the
   checkout lacks gives a row saying so) at the same shapes, each compared with the float32
   torch kernel.
3. ``normaliser``: the adapter's normaliser as it was (strided cumsum) vs as it is now.
4. ``profile``: ``torch.profiler``'s top kernels of each contender at ``PROFILE_SHAPE``.
5. ``model``: the reversal model's training step (width 256, 2 layers) at B·N = 64k tokens,
   softmax vs ``linear`` (auto, torch, fla), N = 1k … 16k.
6. ``decode``: ms per token of ``step`` after 1k … 64k tokens vs softmax's preallocated KV cache.
7. ``kernels-64k``: every contender at N = 65,536 (H 4, D 64, B 1), if time allows.
8. ``parity``: the CUDA tests of the fla kernel; then ``latency``: every feature-map backend at
   H 4 (fwd, fwd+bwd, causal and not); ``training``: the bf16-mixed step of each experiment.

The estimates are for an H100 with a cold Triton cache and ``--fla-autotune reduced`` (the
2026-11-26 run: model 58 s, decode 18 s; fla's first calls ~20 s per (K, V) pair); stages
1–7 are estimated at 7.1 minutes (the triton rows and the copy bandwidth included).
``dry_plan`` is the same stages at toy shapes on the CPU (``DRY``), float32, where the CUDA-only
contenders give rows that say so.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from lab.benchmarks.gpu_report.calls import Shape
from lab.benchmarks.gpu_report.child import COPY, KERNELS, PROFILE, command
from lab.benchmarks.gpu_report.runner import Stage

# The three regimes of docs/benchmarks.md (B·N constant within each); the targets' shapes first.
TARGET_SHAPES = (Shape(2, 4, 32768, 64), Shape(1, 32, 16384, 128))
REGIMES = (
    (Shape(16, 32, 1024, 128), Shape(4, 32, 4096, 128), Shape(1, 32, 16384, 128)),
    (Shape(16, 4, 4096, 64), Shape(8, 4, 8192, 64), Shape(4, 4, 16384, 64), Shape(2, 4, 32768, 64)),
    (Shape(8, 16, 4096, 64), Shape(2, 16, 16384, 64)),
)
SHAPES = tuple(dict.fromkeys((*TARGET_SHAPES, *(s for r in REGIMES for s in r))))
LONG_SHAPE = Shape(1, 4, 65536, 64)
PROFILE_SHAPE = Shape(4, 32, 4096, 128)  # where the torch kernel was profiled, 2026-11-28
ANCHOR = ("fla-op", "fla-op-raw")
LINEAR = ("flash", "linear:fla", "linear:torch", "linear:auto", "linear:triton")
NORMALISER = ("normaliser:old", "normaliser:new")
PROFILED = ("flash", "fla-op", "linear:fla", "linear:torch")

SOFTMAX, LINEAR_BACKEND = "softmax", "linear"
MODEL_LENGTHS = (1024, 2048, 4096, 8192, 16384)
CONTEXTS = (1024, 4096, 16384, 65536)
TOKENS, WIDTH, HEADS, HEAD_DIM = 65536, 256, 4, 64
MODEL_BACKENDS = (
    SOFTMAX,
    LINEAR_BACKEND,
    "linear:implementation=torch",
    "linear:implementation=fla",
)
FAMILIES = ("linear", "performer", "polysketch:evaluation=features", "mean")
CUDA_TESTS = "tests/attention/test_fla_cuda.py"
CPU_TESTS = "tests/attention/ops/test_fla.py"
# Set for the report's stages: tests/conftest.py then prints each failure as it happens.
FAILURES_AT_ONCE = "ATTN_LIGHTNING_FAILURES_AT_ONCE"
NO_TESTS = "tests/ not found: run the report from the repository root"


def words(*values: object) -> str:
    """Shell-quoted, space-joined: pieces of a job's command line (``shlex.split`` reads it)."""
    return " ".join(shlex.quote(str(v)) for v in values)


@dataclass(frozen=True)
class Sizes:
    """What a plan measures: the CUDA report's (``CUDA``) or the dry run's (``DRY``)."""

    shapes: tuple[Shape, ...]
    long_shape: Shape
    profile_shape: Shape
    kernel_flags: str  # device, dtype, repeats and warm-ups of the kernels and profile jobs
    model_lengths: tuple[int, ...]
    model_tokens: int
    width: int
    model_flags: str
    contexts: tuple[int, ...]
    decode_flags: str
    tests: str  # the tests of the parity stage, and their -k selection
    selection: str
    scale: float  # of the estimates (1 on an H100)
    cuda: bool = True
    copy_mb: float = 1024.0  # of each tensor of the copy-bandwidth job (1 GiB: far past L2)


CUDA = Sizes(
    SHAPES,
    LONG_SHAPE,
    PROFILE_SHAPE,
    "--device cuda --dtype bfloat16 --warmup 3",
    MODEL_LENGTHS,
    TOKENS,
    WIDTH,
    "--device cuda --dtype bfloat16 --repeats 5 --warmup 2 --budget 2",
    CONTEXTS,
    "--device cuda --repeats 50 --warmup 5",
    CUDA_TESTS,
    "not training_step",
    1.0,
)
DRY = Sizes(
    (Shape(1, 2, 32, 8), Shape(2, 2, 16, 8)),
    Shape(1, 2, 64, 8),
    Shape(1, 2, 32, 8),
    "--device cpu --dtype float32 --warmup 1",
    (32,),
    64,
    16,
    "--device cpu --dtype float32 --repeats 1 --warmup 0 --budget 1",
    (16, 64),
    "--device cpu --repeats 1 --warmup 0",
    CPU_TESTS,
    "dispatch_rule or unknown_implementation",
    0.05,
    cuda=False,
    copy_mb=8.0,
)


def kernel_job(
    out: Path, tag: str, shapes: Sequence[Shape], contenders: Sequence[str], sizes: Sizes
) -> list[str]:
    """A ``kernels`` job (``kernels.py``) writing ``<out>/kernels/<tag>.{csv,md}``."""
    repeats = 10 if sizes.cuda else 2
    return shlex.split(
        f"{KERNELS} --shapes {words(*shapes)} --contenders {words(*contenders)} "
        f"{sizes.kernel_flags} --repeats {repeats} --out {words(out / 'kernels')} --tag {tag}"
    )


def copy_job(out: Path, sizes: Sizes) -> list[str]:
    """The copy-bandwidth job (``bandwidth.py``) writing ``<out>/bandwidth/copy.csv`` once."""
    device = "cuda" if sizes.cuda else "cpu"
    return shlex.split(
        f"{COPY} --device {device} --size-mb {sizes.copy_mb:g} --out {words(out / 'bandwidth')}"
    )


def profile_job(out: Path, sizes: Sizes) -> list[str]:
    """A ``profile`` job (``profile.py``) writing ``<out>/profile/top_kernels.{csv,md}``."""
    return shlex.split(
        f"{PROFILE} --shape {sizes.profile_shape} --contenders {words(*PROFILED)} "
        f"{sizes.kernel_flags} --out {words(out / 'profile')} --tag top_kernels"
    )


def model_jobs(out: Path, sizes: Sizes) -> list[list[str]]:
    """The reversal model's training step at constant B·N (one job per N, its own file)."""
    backends = [b for b in MODEL_BACKENDS if sizes.cuda or not b.endswith("=fla")]
    return [
        shlex.split(
            f"model --models reversal --widths {sizes.width} --layers 2 --heads {HEADS} "
            f"--batch {max(1, sizes.model_tokens // n)} --lengths {n} "
            f"--backends {words(*backends)} {sizes.model_flags} "
            f"--out {words(out / 'model')} --tag model_tokens_N{n}"
        )
        for n in sizes.model_lengths
    ]


def decode_job(out: Path, sizes: Sizes) -> list[str]:
    """``step`` of ``linear`` (and Performer) against softmax's KV cache, B = 1."""
    return shlex.split(
        f"decode --contexts {words(*sizes.contexts)} --backends {SOFTMAX} {LINEAR_BACKEND} "
        f"performer --batch 1 --heads {HEADS} --head-dim {HEAD_DIM} {sizes.decode_flags} "
        f"--out {words(out / 'decode')} --tag decode_b1"
    )


def latency_jobs(out: Path) -> list[list[str]]:
    """Every feature-map backend on both kernels (fla only for ``linear`` in bf16, where F = Dv)
    and softmax, fwd and fwd+bwd, causal and not, N = 1k … 64k at B·N = 64k tokens."""
    jobs = []
    for family in (SOFTMAX, *FAMILIES):
        kernels = ("torch", "fla") if family == "linear" else ("torch",)
        sep = "," if ":" in family else ":"
        specs = (
            [family] if family == SOFTMAX else [f"{family}{sep}implementation={k}" for k in kernels]
        )
        jobs.append(
            shlex.split(
                f"latency --protocol constant-tokens --tokens {TOKENS} --heads {HEADS} "
                f"--head-dim {HEAD_DIM} --lengths 1024 4096 16384 32768 65536 --device cuda "
                f"--repeats 5 --warmup 2 --budget 1 --dtype bfloat16 --backends {words(*specs)} "
                f"--no-plots --out {words(out / 'latency')} --tag latency_{family.split(':')[0]}"
            )
        )
    return jobs


def pytest_command(out: Path, tests: str, name: str, selection: str | None) -> tuple[str, ...]:
    """pytest of ``tests`` (``-k selection`` if given); JUnit XML ``<out>/parity/<name>.xml``."""
    junit = out / "parity" / f"{name}.xml"
    # -v: one line per test as it ends, so a stage killed at its timeout still says what passed.
    argv = [sys.executable, "-m", "pytest", tests, "-v", "-p", "no:cacheprovider", "-rfE"]
    argv += ["-k", selection] if selection else []
    return (*argv, f"--junitxml={junit}")


def plan(out: Path, tests_root: Path | None, sizes: Sizes) -> list[Stage]:
    """The stages, in order of value (the module doc): name, what, command, estimate, timeout.

    The CUDA-only broad stages (``latency``, ``training``) are not in the dry run."""
    no_tests = None if tests_root else NO_TESTS
    k = sizes.scale

    def kernels(tag: str, shapes: Sequence[Shape], who: Sequence[str]) -> tuple[str, ...]:
        # The copy bandwidth first: measured by whichever of these stages runs first.
        return command([copy_job(out, sizes), kernel_job(out, tag, shapes, who, sizes)])

    every = (*ANCHOR, *LINEAR)
    stages = [
        Stage(
            "anchor",
            "fla's own op (the anchor), every shape",
            kernels("anchor", sizes.shapes, ANCHOR),
            120 * k,  # fla's compilations: ~23 per (K, V, H) key under reduced, 3 keys here
            240,
        ),
        Stage(
            "kernels",
            "flash and linear on each kernel, every shape",
            kernels("kernels", sizes.shapes, LINEAR),
            110 * k,  # 20 s more than before the triton rows: their first calls compile
            220,
        ),
        Stage(
            "normaliser",
            "the fla path's normaliser, before vs now",
            kernels("normaliser", sizes.shapes, NORMALISER),
            20 * k,
            60,
        ),
        Stage(
            "profile",
            f"top kernels of each contender at {sizes.profile_shape}",
            command([profile_job(out, sizes)]),
            30 * k,
            90,
        ),
        Stage(
            "model",
            "reversal training step, B·N tokens constant",
            command(model_jobs(out, sizes)),
            75 * k,
            150,
        ),
        Stage(
            "decode",
            "ms per decoded token vs context",
            command([decode_job(out, sizes)]),
            25 * k,
            60,
        ),
        Stage(
            "kernels-64k",
            f"every contender at {sizes.long_shape}",
            kernels("kernels_64k", [sizes.long_shape], every),
            45 * k,
            100,
        ),
        Stage(
            "parity",
            "tests of the fla kernel",
            pytest_command(out, sizes.tests, "parity", sizes.selection),
            150 * k,
            240,
            no_tests,
        ),
    ]
    if not sizes.cuda:
        return stages
    training = pytest_command(out, CUDA_TESTS, "training", "training_step")
    return [
        *stages,
        Stage(
            "latency",
            "every feature-map backend, H 4, B·N = 64k",
            command(latency_jobs(out)),
            150,
            240,
        ),
        Stage("training", "bf16-mixed step of each experiment", training, 90, 150, no_tests),
    ]


def cuda_plan(out: Path, tests_root: Path | None) -> list[Stage]:
    """The stages on a CUDA machine."""
    return plan(out, tests_root, CUDA)


def dry_plan(out: Path, tests_root: Path | None) -> list[Stage]:
    """The same stages at toy shapes on the CPU: tests the pipeline, measures nothing."""
    return plan(out, tests_root, DRY)
