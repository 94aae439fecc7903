"""The GPU report: the benchmark commands in order of value under one time budget, then one page.

    python -m lab.benchmarks.gpu_report --budget-min 12 --out "$OUT"    # a CUDA machine
    python -m lab.benchmarks.gpu_report --dry-run --out out/gpu_report  # print the commands
    python -m lab.benchmarks.gpu_report --cpu --stages bandwidth --out out/gr  # toy shapes, CPU

Each stage is ``python -m lab.benchmark <command> ... --out <out>/<stage>`` (pytest for the CUDA
tests), run from the repository root as a subprocess of its own, its output in
``<out>/logs/<stage>.log``. In order of value: the device's copy bandwidth (the roofline, seconds);
fla's own op (the anchor, first: a report without it cannot judge our fla path, and it pays fla's
first-call autotuning for the stages after it); flash and ``linear`` on each kernel at the three
regimes; the normaliser before vs now; the profiler's top kernels; the reversal model's training
step; decode vs the KV cache; every contender at N = 64k; the CUDA tests of the fla kernel; every
feature-map backend per call; the bf16-mixed step of each experiment.

A stage's timeout is what is left of the budget, capped by its own ``cap_s`` (one hung autotune
cannot eat the lease); past it the stage's process group is killed. A stage that fails or times
out is recorded and the next one runs; once the budget is spent the rest are recorded as not run.
After each stage ``<out>/stages.csv`` (the provenance, then each stage's status, seconds and
command) is rewritten and the page rebuilt from the files under ``<out>`` (``gpu_page``), so a run
killed from outside keeps what its finished stages measured. This process never touches the GPU.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from attn_lightning.attention.ops import fla, fla_autotune
from attn_lightning.records import environment, write_csv
from attn_lightning.records.environment import command_line
from lab.benchmarks import gpu_page
from lab.benchmarks.contenders import Shape

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[2]  # the repository root: lab/ and tests/ are there
PROG = "python -m lab.benchmarks.gpu_report"
# Set for the test stages: tests/conftest.py then prints each failure as it happens (a stage
# killed at its timeout never reaches pytest's summary).
FAILURES_AT_ONCE = "ATTN_LIGHTNING_FAILURES_AT_ONCE"
PACKAGES = ("torch", "triton", "fla-core", "einops", "lightning", "numpy")

# The three regimes of docs/benchmarks.md (B·N constant within each); the targets' shapes first.
SHAPES = (
    *(Shape(2, 4, 32768, 64), Shape(1, 32, 16384, 128)),
    *(Shape(16, 32, 1024, 128), Shape(4, 32, 4096, 128)),
    *(Shape(16, 4, 4096, 64), Shape(8, 4, 8192, 64), Shape(4, 4, 16384, 64)),
    *(Shape(8, 16, 4096, 64), Shape(2, 16, 16384, 64)),
)
ANCHOR = ("fla-op", "fla-op-raw")
LINEAR = ("flash", "linear:fla", "linear:torch", "linear:auto", "linear:triton")
NORMALISER = ("normaliser:old", "normaliser:new")
PROFILED = ("flash", "fla-op", "linear:fla", "linear:torch")
FAMILIES = ("linear", "performer", "polysketch:evaluation=features", "mean")
FLA_TESTS = "tests/attention/test_fla_cuda.py"


@dataclass(frozen=True)
class Sizes:
    """What the stages measure: on a GPU (``CUDA``) or at toy shapes on the CPU (``CPU``)."""

    shapes: tuple[Shape, ...]
    long_shape: Shape
    profile_shape: Shape
    race: str  # device, dtype, repeats and warm-ups of race and profile
    model_lengths: tuple[int, ...]
    model_tokens: int
    width: int
    model: str
    contexts: tuple[int, ...]
    decode: str
    copy_mb: float
    device: str


CUDA = Sizes(
    SHAPES,
    Shape(1, 4, 65536, 64),
    Shape(4, 32, 4096, 128),  # where the torch kernel was profiled, 2026-11-28
    "--device cuda --dtype bfloat16 --warmup 3",
    (1024, 2048, 4096, 8192, 16384),
    65536,
    256,
    "--device cuda --dtype bfloat16 --repeats 5 --warmup 2 --budget 2",
    (1024, 4096, 16384, 65536),
    "--device cuda --repeats 50 --warmup 5",
    1024.0,  # each tensor of the copy: far past L2
    "cuda",
)
CPU = Sizes(
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
    8.0,
    "cpu",
)


@dataclass(frozen=True)
class Stage:
    """One stage: its commands (run one after another) and the most seconds it may run."""

    name: str
    what: str
    commands: tuple[tuple[str, ...], ...]
    cap_s: float


def _bench(line: str) -> tuple[str, ...]:
    return (sys.executable, "-m", "lab.benchmark", *shlex.split(line))


def _words(*values: object) -> str:
    return " ".join(shlex.quote(str(v)) for v in values)


def _pytest(out: Path, name: str, selection: str) -> tuple[str, ...]:
    # -v: a line per test as it ends, so a stage killed at its timeout still says what passed.
    junit = f"--junitxml={out / name / 'tests.xml'}"
    argv = (sys.executable, "-m", "pytest", FLA_TESTS, "-v", "-p", "no:cacheprovider", "-rfE")
    return (*argv, "-k", selection, junit)


def stages(out: Path, sizes: Sizes) -> list[Stage]:
    """The stages in order of value (the module doc); on the CPU without the CUDA-only three."""
    s = sizes
    repeats = 10 if s.device == "cuda" else 2

    def race(stage: str, shapes: Sequence[Shape], who: Sequence[str]) -> tuple[str, ...]:
        return _bench(
            f"race --shapes {_words(*shapes)} --contenders {_words(*who)} {s.race} "
            f"--repeats {repeats} --out {out / stage}"
        )

    backends = ["softmax", "linear", "linear:implementation=torch", "linear:implementation=fla"]
    backends = backends if s.device == "cuda" else backends[:3]  # fla has no CPU kernel
    model = tuple(
        _bench(
            f"model --models reversal --widths {s.width} --layers 2 --heads 4 "
            f"--batch {max(1, s.model_tokens // n)} --lengths {n} --backends {_words(*backends)} "
            f"{s.model} --out {out / 'model'} --tag model_tokens_N{n}"
        )
        for n in s.model_lengths
    )
    copy = f"bandwidth --device {s.device} --size-mb {s.copy_mb:g} --out {out / 'bandwidth'}"
    top = f"profile --shape {s.profile_shape} --contenders {_words(*PROFILED)} {s.race}"
    decode = (
        f"decode --contexts {_words(*s.contexts)} --backends softmax linear performer --batch 1 "
        f"--heads 4 --head-dim 64 {s.decode} --out {out / 'decode'} --tag decode_b1"
    )
    found = [
        Stage("bandwidth", "the device's copy bandwidth", (_bench(copy),), 60),
        Stage("anchor", "fla's own op, every shape", (race("anchor", s.shapes, ANCHOR),), 240),
        Stage("kernels", "flash, linear on each kernel", (race("kernels", s.shapes, LINEAR),), 220),
        Stage("normaliser", "the fla path's normaliser, before vs now",
              (race("normaliser", s.shapes, NORMALISER),), 60),
        Stage("profile", f"top kernels of each contender at {s.profile_shape}",
              (_bench(f"{top} --out {out / 'profile'}"),), 90),
        Stage("model", "reversal training step, B·N tokens constant", model, 150),
        Stage("decode", "ms per decoded token vs context", (_bench(decode),), 60),
        Stage("kernels-64k", f"every contender at {s.long_shape}",
              (race("kernels-64k", [s.long_shape], (*ANCHOR, *LINEAR)),), 100),
    ]  # fmt: skip
    if s.device != "cuda":
        return found
    specs = ["softmax"]
    for family in FAMILIES:
        kernels = ("torch", "fla") if family == "linear" else ("torch",)
        sep = "," if ":" in family else ":"
        specs += [f"{family}{sep}implementation={k}" for k in kernels]
    latency = _bench(
        f"latency --protocol constant-tokens --tokens 65536 --heads 4 --head-dim 64 "
        f"--lengths 1024 4096 16384 32768 65536 --device cuda --repeats 5 --warmup 2 --budget 1 "
        f"--dtype bfloat16 --backends {_words(*specs)} --out {out / 'latency'} --tag latency"
    )
    parity, training = (
        _pytest(out, "parity", "not training_step"),
        _pytest(out, "training", "training_step"),
    )
    return [
        *found,
        Stage("parity", "CUDA tests of the fla kernel", (parity,), 240),
        Stage("latency", "every feature-map backend, H 4, B·N = 64k", (latency,), 240),
        Stage("training", "bf16-mixed step of each experiment", (training,), 150),
    ]


@dataclass
class Result:
    """What became of a stage: done, failed, timed out, not run (budget spent) or not asked."""

    stage: str
    what: str
    status: str = "not run"
    seconds: float = 0.0
    note: str = ""
    command: str = ""


def run_command(argv: Sequence[str], log_path: Path, timeout_s: float, env: dict[str, str]) -> str:
    """Run ``argv`` from the repository root, output appended to ``log_path``; return ``done``,
    ``timed out`` (its process group killed: Triton's compile workers too) or ``exit N``."""
    with log_path.open("a") as fh:
        fh.write(f"$ {shlex.join(argv)}\n")
        fh.flush()
        proc = subprocess.Popen(
            argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
        )
        try:
            code = proc.wait(timeout=max(timeout_s, 0.1))
        except subprocess.TimeoutExpired:
            for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(timeout=grace)
                    break
                except ProcessLookupError:
                    break
                except subprocess.TimeoutExpired:
                    continue
            return "timed out"
    return "done" if code == 0 else f"exit {code}"


def provenance(args: argparse.Namespace, argv: Sequence[str]) -> dict[str, str]:
    """Where and with what the report ran: GPU (nvidia-smi), host, versions, command, budget."""
    found = {"python": sys.version.split()[0], "torch CUDA": str(torch.version.cuda)}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        smi = f"nvidia-smi: {err}"
    meta = environment(
        torch.device("cpu"),  # this process computes nothing: the host line
        command=command_line(PROG, list(argv)),
        versions=", ".join(f"{k} {v}" for k, v in found.items()),
        fla=fla.missing_reason() or "fla-core usable",
        fla_autotune=args.fla_autotune,
        budget_min=f"{args.budget_min:g}",
        shapes=gpu_page.TOY if args.cpu else "the GPU report's",
    )
    meta.pop("torch_threads", None)
    return {"gpu": smi or "none", "host": meta.pop("device"), **meta}


def build_parser() -> argparse.ArgumentParser:
    names = [s.name for s in stages(Path("out"), CUDA)]
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("out/gpu_report"), help="result folder")
    parser.add_argument(
        "--budget-min",
        type=float,
        default=8.0,
        help="wall-clock budget of all the stages in minutes (default 8)",
    )
    parser.add_argument(
        "--stages",
        nargs="+",
        choices=names,
        metavar="STAGE",
        help=f"only these, in this order (default: all): {' '.join(names)}",
    )
    parser.add_argument(
        "--fla-autotune",
        choices=fla_autotune.MODES,
        default="reduced",
        help="fla's first-call autotuning: reduced (4 warps, <= 3 stages: "
        "~4x fewer compilations on a fresh machine) or full (as installed)",
    )
    parser.add_argument(
        "--cpu",
        action="store_true",
        help="toy shapes on the CPU: tests the script and page, no GPU result",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stages within the budget, rewriting ``stages.csv`` and the page after each."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.budget_min <= 0:
        parser.error(f"--budget-min must be > 0, got {args.budget_min:g}")
    out: Path = args.out.resolve()  # the stages run from the repository root
    chosen = [
        s
        for s in stages(out, CPU if args.cpu else CUDA)
        if args.stages is None or s.name in args.stages
    ]
    if args.dry_run:
        for stage in chosen:
            print(f"# {stage.name}: {stage.what} (at most {stage.cap_s:g} s)")
            print("\n".join(shlex.join(c) for c in stage.commands))
        return 0
    if not args.cpu and not torch.cuda.is_available():
        parser.error(
            "needs CUDA and torch.cuda.is_available() is False here; "
            "--cpu runs the stages at toy shapes on the CPU, "
            "--dry-run prints them"
        )
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    meta = provenance(args, argv)
    env = {**os.environ, fla_autotune.ENV: args.fla_autotune, FAILURES_AT_ONCE: "1"}
    results = [
        Result(s.name, s.what, command=" && ".join(map(shlex.join, s.commands))) for s in chosen
    ]
    deadline = time.monotonic() + args.budget_min * 60
    for stage, result in zip(chosen, results, strict=True):
        began = time.monotonic()
        if began >= deadline:
            result.note = "the budget was spent"
            continue
        said: list[str] = []
        for command in stage.commands:  # model: one command per N
            left = min(deadline, began + stage.cap_s) - time.monotonic()
            if left <= 0:
                said.append("timed out")
                break
            log.info("gpu-report: %s, up to %.0f s: %s", stage.name, left, shlex.join(command))
            said.append(run_command(command, out / "logs" / f"{stage.name}.log", left, env))
        worst = next((x for x in said if x != "done"), "done")
        result.status = worst if worst in ("done", "timed out") else "failed"
        result.note = "" if worst == "done" else f"{worst}; see logs/{stage.name}.log"
        result.seconds = time.monotonic() - began
        log.info("gpu-report: %s %s in %.0f s", stage.name, result.status, result.seconds)
        write_csv(out / "stages.csv", results, meta)
        gpu_page.write_page(out)
    write_csv(out / "stages.csv", results, meta)
    print(gpu_page.write_page(out), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
