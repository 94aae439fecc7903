"""What the GPU report runs, in order of value, and with which shares of the budget.

1. ``parity``: the CUDA tests of the fla kernel (``tests/attention/test_fla_cuda.py``, without
   the training steps): a speed measured on wrong outputs is worth nothing.
2. ``latency-bfloat16-tokens``: one attention call, fwd and fwd+bwd, causal and not, N = 1k … 64k
   at B·N = 64k tokens (H = 4, D = 64): SDPA (flash) and every feature-map backend with
   ``implementation=torch`` and ``=fla``, peak memory too; then ``anchor``: fla's own op on the
   same shapes (``anchor.py``).
   ``latency-bfloat16-heads32``: softmax and ``linear`` (both kernels) at H = 32, B·N = 16k.
3. ``model-bfloat16``: the whole training step of the reversal model (2 layers, width 256) at
   B·N = 64k tokens for N = 1k … 16k, and at B = 1.
4. ``decode``: ms per token of ``step`` at 1k … 64k tokens of context (the recurrent state vs
   softmax's preallocated KV cache).
5. The same calls at B = 1 (bf16), then in float32 (SDPA chooses its kernel; fla runs fp32 as
   TF32), and last the bf16-mixed training step of each experiment (``training``).

``smoke_plan`` is the same pipeline at toy sizes on the CPU (the fla stages skipped): it tests
the command, not a GPU.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from attn_lightning.benchmarks.gpu_report.child import ANCHOR, command
from attn_lightning.benchmarks.gpu_report.runner import Stage

LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768, 65536)
MODEL_LENGTHS = (1024, 2048, 4096, 8192, 16384)
CONTEXTS = (1024, 4096, 16384, 65536)
TOKENS = 65536  # B·N of the realistic batch
HEADS, HEAD_DIM, WIDTH = 4, 64, 256
SOFTMAX = "softmax"
# Each feature-map backend as timed: PolySketch in its feature form (the one fla can run).
FAMILIES = {
    "linear": "linear",
    "performer": "performer",
    "polysketch": "polysketch:evaluation=features",
    "mean": "mean",
}
CUDA_TESTS = "tests/attention/test_fla_cuda.py"
# Set for the report's stages: tests/conftest.py then prints each failure as it happens.
FAILURES_AT_ONCE = "ATTN_LIGHTNING_FAILURES_AT_ONCE"
CPU_TESTS = "tests/attention/ops/test_fla.py"


def with_option(spec: str, key: str, value: object) -> str:
    """``name[:a=b]`` with one more ``key=value``."""
    return f"{spec}{',' if ':' in spec else ':'}{key}={value}"


def label(family: str, kernel: str) -> str:
    """The backend spec (and row label) of ``family`` on ``kernel``: torch or fla."""
    return with_option(FAMILIES[family], "implementation", kernel)


def words(*values: object) -> str:
    """Shell-quoted, space-joined: pieces of a job's command line (``shlex.split`` reads it)."""
    return " ".join(shlex.quote(str(v)) for v in values)


PROTOCOLS = {  # the report's two batch regimes, as ``latency``/``anchor`` flags
    "tokens": f"--protocol constant-tokens --tokens {TOKENS}",
    "b1": "--protocol small-batch --batch 1",
}
SHAPE = f"--heads {HEADS} --head-dim {HEAD_DIM} --lengths {words(*LENGTHS)}"


def _timing(point_s: float) -> str:
    return f"--device cuda --repeats 5 --warmup 2 --budget {point_s:g}"


def kernels(family: str, dtype: str) -> tuple[str, ...]:
    """The kernels timed for ``family``: fla in bf16 only where F = Dv (``linear``: fla refuses
    bf16 with F != Dv, attention/ops/fla.py), both elsewhere."""
    return ("torch", "fla") if dtype != "bfloat16" or family == "linear" else ("torch",)


def latency_jobs(out: Path, dtype: str, protocol: str, point_s: float) -> list[list[str]]:
    """One ``latency`` job per backend family (softmax first), each with its own files."""
    jobs = []
    for family in (SOFTMAX, *FAMILIES):
        specs = [SOFTMAX]
        if family != SOFTMAX:
            specs = [label(family, k) for k in kernels(family, dtype)]
        line = f"latency {PROTOCOLS[protocol]} {SHAPE} {_timing(point_s)} --dtype {dtype} "
        line += f"--backends {words(*specs)} --no-plots --out {words(out / 'latency')} "
        jobs.append(shlex.split(line + f"--tag latency_{protocol}_{dtype}_{family}"))
    return jobs


MANY_HEADS, MANY_HEADS_TOKENS = 32, 16384
MANY_HEADS_LENGTHS = (1024, 2048, 4096, 8192, 16384)


def many_heads_jobs(out: Path, point_s: float) -> list[list[str]]:
    """softmax and ``linear`` on both kernels at H = 32, B·N = 16k tokens, bf16: the regime of
    fla's own benchmark (many (batch, head) pairs), where its chunk-sequential state kernels
    have work for every SM; at H = 4 they did not (docs/benchmarks.md, Results: GPU)."""
    specs = [SOFTMAX, label("linear", "torch"), label("linear", "fla")]
    return [
        shlex.split(
            f"latency --protocol constant-tokens --tokens {MANY_HEADS_TOKENS} "
            f"--heads {MANY_HEADS} --head-dim {HEAD_DIM} --lengths {words(*MANY_HEADS_LENGTHS)} "
            f"{_timing(point_s)} --dtype bfloat16 --backends {words(*specs)} --no-plots "
            f"--out {words(out / 'latency')} --tag latency_tokens_bfloat16_H{MANY_HEADS}"
        )
    ]


def anchor_jobs(out: Path, point_s: float) -> list[list[str]]:
    """fla's own op, bf16 first, at both batch regimes, then float32."""
    return [
        shlex.split(
            f"{ANCHOR} {PROTOCOLS[protocol]} {SHAPE} {_timing(point_s)} --dtype {dtype} "
            f"--out {words(out / 'anchor')} --tag anchor_{protocol}_{dtype}"
        )
        for dtype in ("bfloat16", "float32")
        for protocol in PROTOCOLS
    ]


MODEL_BACKENDS = (  # bf16-mixed: fla only for linear (kernels)
    SOFTMAX,
    label("linear", "torch"),
    label("linear", "fla"),
    label("performer", "torch"),
    label("polysketch", "torch"),
)


def model_jobs(out: Path, step_s: float) -> list[list[str]]:
    """The reversal model's training step at B·N = 64k tokens (one job per N), then at B = 1."""
    sizes: list[tuple[int, tuple[int, ...], str]]
    sizes = [(TOKENS // n, (n,), f"model_tokens_N{n}") for n in MODEL_LENGTHS]
    sizes.append((1, MODEL_LENGTHS, "model_b1"))
    return [
        shlex.split(
            f"model --models reversal --widths {WIDTH} --layers 2 --heads {HEADS} "
            f"--batch {batch} --lengths {words(*lengths)} --backends {words(*MODEL_BACKENDS)} "
            f"--dtype bfloat16 {_timing(step_s)} --out {words(out / 'model')} --tag {tag}"
        )
        for batch, lengths, tag in sizes
    ]


def decode_jobs(out: Path) -> list[list[str]]:
    """``step`` of every feature-map backend and softmax's KV cache, B = 1, fp32."""
    backends = [SOFTMAX, label("linear", "fla"), *list(FAMILIES.values())[1:]]
    return [
        shlex.split(
            f"decode --contexts {words(*CONTEXTS)} --backends {words(*backends)} --batch 1 "
            f"--heads {HEADS} --head-dim {HEAD_DIM} --device cuda --repeats 50 --warmup 5 "
            f"--out {words(out / 'decode')} --tag decode_cuda_b1"
        )
    ]


def pytest_command(out: Path, tests: str, name: str, selection: str | None) -> tuple[str, ...]:
    """pytest of ``tests`` (``-k selection`` if given); JUnit XML ``<out>/parity/<name>.xml``."""
    junit = out / "parity" / f"{name}.xml"
    # -v: one line per test as it ends, so a stage killed at its share still says what passed.
    argv = [sys.executable, "-m", "pytest", tests, "-v", "-p", "no:cacheprovider", "-rfE"]
    argv += ["-k", selection] if selection else []
    return (*argv, f"--junitxml={junit}")


NO_TESTS = "tests/ not found: run the report from the repository root"


def cuda_plan(out: Path, minutes: float, tests_root: Path | None) -> list[Stage]:
    """The stages on a CUDA machine; per-point budgets scale with the whole budget (1 s at 20
    minutes, between 0.5 and 5 s)."""
    point_s = min(5.0, max(0.5, minutes / 20))
    no_tests = None if tests_root else NO_TESTS

    def latency(dtype: str, protocol: str, what: str, weight: float) -> Stage:
        jobs = latency_jobs(out, dtype, protocol, point_s)
        return Stage(f"latency-{dtype}-{protocol}", what, command(jobs), weight)

    parity = pytest_command(out, CUDA_TESTS, "parity", "not training_step")
    training = pytest_command(out, CUDA_TESTS, "training", "training_step")
    return [
        Stage("parity", "CUDA tests of the fla kernel (parity subset)", parity, 3, no_tests),
        latency("bfloat16", "tokens", "per call, bf16, B·N = 64k tokens", 4),
        Stage("anchor", "fla's own op, latency shapes", command(anchor_jobs(out, point_s)), 1.5),
        Stage(
            "latency-bfloat16-heads32",
            "per call, bf16, H = 32, B·N = 16k tokens: softmax, linear torch and fla",
            command(many_heads_jobs(out, point_s)),
            1.5,
        ),
        Stage("model-bfloat16", "training step, bf16", command(model_jobs(out, 2 * point_s)), 3),
        Stage("decode", "ms per decoded token vs context", command(decode_jobs(out)), 1),
        latency("bfloat16", "b1", "per call, bf16, B = 1", 2),
        latency("float32", "tokens", "per call, fp32, B·N = 64k tokens", 2),
        latency("float32", "b1", "per call, fp32, B = 1", 1),
        Stage("training", "bf16-mixed step of each experiment", training, 1.5, no_tests),
    ]


def smoke_plan(out: Path, tests_root: Path | None) -> list[Stage]:
    """The same pipeline at toy sizes on the CPU: seconds, no GPU, fla's kernels skipped."""
    tiny = "--heads 2 --head-dim 8 --device cpu --repeats 1 --warmup 0"
    latency = (
        f"latency --protocol small-batch --batch 1 --lengths 32 64 {tiny} --budget 0.2 "
        f"--matmul-size 64 --backends {SOFTMAX} {label('linear', 'torch')} --no-plots "
        f"--no-memory --out {words(out / 'latency')} --tag latency_b1_float32_smoke"
    )
    model = (
        f"model --models reversal --widths 16 --layers 1 --heads 2 --batch 2 --lengths 32 "
        f"--backends {SOFTMAX} {label('linear', 'torch')} --device cpu --repeats 1 --warmup 0 "
        f"--budget 1 --out {words(out / 'model')} --tag model_smoke"
    )
    decode = (
        f"decode --contexts 16 64 --backends {SOFTMAX} linear --batch 1 {tiny} "
        f"--out {words(out / 'decode')} --tag decode_smoke"
    )
    needs_cuda = "needs CUDA (fla's kernels are Triton): not part of the CPU smoke run"
    parity = pytest_command(out, CPU_TESTS, "parity", None)
    return [
        Stage("parity", "the fla adapter's CPU tests", parity, 1, None if tests_root else NO_TESTS),
        Stage("latency-float32-b1", "per call, toy sizes", command([shlex.split(latency)]), 1),
        Stage("anchor", "fla's own op", (), 1, needs_cuda),
        Stage("model-float32", "training step, toy sizes", command([shlex.split(model)]), 1),
        Stage("decode", "ms per decoded token, toy sizes", command([shlex.split(decode)]), 1),
    ]
