"""The GPU report: the benchmark commands in order of value under one time budget, then one page.

    python -m lab.benchmarks.gpu_report --budget-min 8 --out "$OUT"   # a CUDA machine
    python -m lab.benchmarks.gpu_report --dry-run                       # print the commands
    python -m lab.benchmarks.gpu_report --page out/gpu_report           # the page again

Each stage is a subprocess (``python -m lab.benchmark ...``, or pytest for the CUDA tests) writing
under ``<out>``. It starts only while a quarter of its cap is left of the budget (else the page
says it was skipped) and is killed, process group and all, at its cap or the budget's end; a
failed or timed-out stage is recorded and the next one runs. ``stages.csv`` and the page are
rewritten after each stage, so a run killed from outside keeps what it measured. This process
never touches the GPU. The page: the provenance, the targets of docs/benchmarks.md met or not,
the stages, the CUDA tests, then the tables the commands wrote.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import os
import shlex
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

import torch

from attn_lightning.attention.ops import fla, fla_autotune
from attn_lightning.records import environment, markdown_meta, markdown_table, read_csv, write_csv
from lab.benchmarks import race
from lab.benchmarks.contenders import Shape
from lab.benchmarks.race import KernelRow, read_rows

ROOT = Path(__file__).resolve().parents[2]  # the repository root: lab/ and tests/ are there
PROG = "python -m lab.benchmarks.gpu_report"
# Set for the test stages: tests/conftest.py then prints each failure as it happens (a stage
# killed at its timeout never reaches pytest's summary).
FAILURES_AT_ONCE = "ATTN_LIGHTNING_FAILURES_AT_ONCE"
PACKAGES = ("torch", "triton", "fla-core", "einops", "lightning", "numpy")
START_SHARE = 0.25  # a stage started with less than this share of its cap rarely times one point

# The three regimes of docs/benchmarks.md (B·N constant within each), the targets' shapes first.
SHAPES = "2x4x32768x64 1x32x16384x128 16x32x1024x128 4x32x4096x128 16x4x4096x64 8x4x8192x64 "
SHAPES += "4x4x16384x64 8x16x4096x64 2x16x16384x64"
RACE = "race --device cuda --dtype bfloat16 --warmup 3 --repeats 10 --contenders {} --shapes {}"
LINEAR = "flash linear:fla linear:torch linear:auto linear:triton"
MODEL = "model --models reversal --widths 256 --layers 2 --heads 4 --device cuda --dtype bfloat16 "
MODEL += "--repeats 5 --warmup 2 --budget 2 --tag model_tokens_N{n} --lengths {n} --batch {b} "
MODEL += "--backends softmax linear linear:implementation=torch linear:implementation=fla"
LATENCY = "latency --protocol constant-tokens --tokens 65536 --heads 4 --head-dim 64 --lengths "
LATENCY += "1024 4096 16384 32768 65536 --device cuda --repeats 5 --warmup 2 --budget 1 --dtype "
LATENCY += "bfloat16 --tag latency --backends softmax linear:implementation=torch "
LATENCY += "linear:implementation=fla performer:implementation=torch mean:implementation=torch "
LATENCY += "polysketch:evaluation=features,implementation=torch "
LATENCY += "taylor:feature_dim=16,evaluation=kernel,implementation=fla "  # fla's Based kernel
LATENCY += "taylor:feature_dim=16,evaluation=features,implementation=fla"
DECODE = "decode --contexts 1024 4096 16384 65536 --backends softmax linear performer --batch 1 "
DECODE += "--heads 4 --head-dim 64 --device cuda --repeats 50 --warmup 5 --tag decode_b1"
PROFILE = "profile --device cuda --dtype bfloat16 --warmup 3 --shape 4x32x4096x128 "
PROFILE += "--contenders flash fla-op linear:fla linear:torch"
# -n 0: one process on the one GPU; -v: failures named as they end.
TESTS = "pytest tests/attention/test_fla_cuda.py -n 0 -v -p no:cacheprovider -rfE -k"


# (stage, cap s, what, its command: lab.benchmark's or pytest's) in order of value; fla's own op
# early: the yardstick, and it pays fla's first-call autotuning for the stages after it.
STAGES = (
    ("bandwidth", 60, "the device's copy bandwidth", "bandwidth --device cuda --size-mb 1024"),
    ("anchor", 240, "fla's own op, every shape", RACE.format("fla-op fla-op-raw", SHAPES)),
    ("kernels", 220, "flash, linear on each kernel", RACE.format(LINEAR, SHAPES)),
    ("normaliser", 60, "the normaliser", RACE.format("normaliser:old normaliser:new", SHAPES)),
    ("profile", 90, "top kernels at 4x32x4096x128", PROFILE),
    *(
        (f"model-N{n}", 40, f"reversal training step, N {n:,}", MODEL.format(n=n, b=65536 // n))
        for n in (1024, 2048, 4096, 8192, 16384)
    ),
    ("decode", 60, "ms per decoded token vs context", DECODE),
    ("kernels-64k", 100, "all at N 64k", RACE.format(f"fla-op {LINEAR}", "1x4x65536x64")),
    ("parity", 240, "CUDA tests of the fla kernel", f"{TESTS} 'not training_step'"),
    ("latency", 240, "every feature-map backend, H 4, B·N 64k", LATENCY),
    ("training", 150, "bf16-mixed step of each experiment", f"{TESTS} training_step"),
)

# The targets (docs/benchmarks.md); the torch kernel's "before": an H100 on 2026-11-28, bf16.
FLA_PATH_LIMIT, TOLERANCE, CROSSOVER_N, DECODE_RATIO, ROOFLINE_LIMIT = 1.15, 0.10, 8192, 10.0, 5.0
AUTO_VS_FLASH = ((Shape(2, 4, 32768, 64), 2.5), (Shape(1, 32, 16384, 128), 1.5))
TORCH_BEFORE = {Shape(16, 32, 1024, 128): 15.9, Shape(4, 32, 4096, 128): 17.4}
TORCH_BEFORE |= {Shape(1, 32, 16384, 128): 17.6}
ROOFLINE_SHAPE = Shape(2, 4, 32768, 64)


def command(name: str, line: str, out: Path) -> list[str]:
    """A stage's argv: ``lab.benchmark`` writing into ``<out>/<name>`` (every model stage into
    ``<out>/model``), or pytest writing its JUnit XML there."""
    folder = out / name.partition("-N")[0]
    if line.startswith("pytest"):
        return [sys.executable, "-m", *shlex.split(line), f"--junitxml={folder / 'tests.xml'}"]
    return [sys.executable, "-m", "lab.benchmark", *shlex.split(line), "--out", str(folder)]


def run(argv: Sequence[str], log: Path, timeout_s: float, env: dict[str, str]) -> str:
    """Run ``argv`` from the repository root, output appended to ``log``; return ``done``,
    ``timed out`` (its process group killed: Triton's compile workers too) or ``exit N``."""
    with log.open("a") as fh:
        print(f"$ {shlex.join(argv)}", file=fh, flush=True)
        proc = subprocess.Popen(  # in a process group of its own, to be killed whole
            argv, stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True
        )
        try:
            code = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return "timed out"
    return "done" if code == 0 else f"exit {code}"


def provenance(argv: Sequence[str], budget_min: float, autotune: str) -> dict[str, str]:
    """Where and with what the report ran: GPU (nvidia-smi), host, versions, command, budget."""
    smi, gpu = "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader", ""
    with contextlib.suppress(OSError, subprocess.SubprocessError):  # no nvidia-smi: gpu none
        gpu = subprocess.run(smi.split(), capture_output=True, text=True, timeout=30).stdout.strip()
    versions = [f"python {sys.version.split()[0]}", f"torch CUDA {torch.version.cuda}"]
    found = importlib.metadata.distributions()
    versions += sorted(f"{d.name} {d.version}" for d in found if d.name in PACKAGES)
    meta = environment(
        torch.device("cpu"),  # this process computes nothing: the host line
        command=f"{PROG} {shlex.join(argv)}",
        versions=", ".join(versions),
        fla=fla.missing_reason() or "fla-core usable",
        fla_autotune=autotune,
        budget_min=f"{budget_min:g}",
    )
    meta.pop("torch_threads", None)
    return {"gpu": gpu or "none", "host": meta.pop("device"), **meta}


def judge(what: str, pairs: dict[str, tuple[float, float]], limit: float, at_most: bool = False,
          every: int = 1) -> list[str]:  # fmt: skip
    """[what, measured, verdict] of a target on ratios a / b: met when every ratio is ≥ ``limit``
    (≤ with ``at_most``) and at least ``every`` were measured; one ratio past it is not met."""
    x = {k: a / b for k, (a, b) in pairs.items()}
    said = ", ".join(f"{a:.3g} / {b:.3g} ms = {x[k]:.2f}× ({k})" for k, (a, b) in pairs.items())
    if any(v > limit if at_most else v < limit for v in x.values()):
        return [what, said, "not met"]
    return [what, said or "–", "met" if len(x) >= every else "not measured"]


def targets(rows: Sequence[KernelRow], model: list[dict[str, str]], decoded: list[dict[str, str]],
            copy: float | None) -> list[list[str]]:  # fmt: skip
    """Every target of docs/benchmarks.md as [what, measured, verdict]."""
    ms: defaultdict[str, dict[Shape, float]] = defaultdict(dict)
    for r in rows:  # a shape timed twice: its last row
        if r.ms is not None:
            ms[r.contender][r.shape] = r.ms
    mine, anchor, auto, flash = ms["linear:fla"], ms["fla-op"], ms["linear:auto"], ms["flash"]
    pairs = {str(s): (t, anchor[s]) for s, t in mine.items() if s in anchor}
    what = f"our fla path ≤ {FLA_PATH_LIMIT}× fla's op at every shape"
    found = [judge(what, pairs, FLA_PATH_LIMIT, True)]
    took = {r.shape: r.kernel.removeprefix("auto: ") for r in rows if r.contender == "linear:auto"}
    for s, want in AUTO_VS_FLASH:
        pairs = {took[s]: (flash[s], auto[s])} if s in auto and s in flash else {}
        found.append(judge(f"linear (auto) ≥ {want}× SDPA flash at {s}", pairs, want))
    kernels = {k: ms[f"linear:{k}"] for k in ("torch", "fla", "triton")}
    pairs = {}
    for s in (s for s in auto if s in kernels.get(took[s], {})):  # auto's pick timed there too
        times = {k: t[s] for k, t in kernels.items() if s in t}
        best = min(times, key=times.__getitem__)
        pairs[f"{s}: {took[s]} / {best}"] = (times[took[s]], times[best])
    what = f"auto within {TOLERANCE:.0%} of the fastest linear kernel at every shape"
    found.append(judge(what, pairs, 1 + TOLERANCE, True))
    now = kernels["torch"]
    pairs = {f"N {s.n:,}": (b, now[s]) for s, b in TORCH_BEFORE.items() if s in now}
    what = "torch kernel ≥ 2× faster than on 2026-11-28 at H 32, D 128"
    found.append(judge(what, pairs, 2.0, every=len(TORCH_BEFORE)))
    step: dict[str, dict[int, float]] = {"linear": {}, "softmax": {}}
    for m in (m for m in model if m["backend"] in step and m["step_ms"]):
        step[m["backend"]][int(m["n"])] = float(m["step_ms"])
    base, fast = step["softmax"], step["linear"]
    both = sorted(set(fast) & set(base)) if CROSSOVER_N in fast.keys() & base.keys() else []
    pairs = {f"N {n:,}": (base[n], fast[n]) for n in both if n >= CROSSOVER_N}
    what = f"reversal step (width 256, B·N 64k): linear faster than softmax at N ≥ {CROSSOVER_N:,}"
    found.append(judge(what, pairs, 1.0))
    at = {d["backend"]: float(d["ms"]) for d in decoded if d["context"] == "65536" and d["ms"]}
    ok = "softmax" in at and "linear" in at
    pairs = {"KV cache / linear": (at["softmax"], at["linear"])} if ok else {}
    what = f"decode per token at 64k context: ≥ {DECODE_RATIO:g}× the preallocated KV cache"
    found.append(judge(what, pairs, DECODE_RATIO))
    t = kernels["triton"].get(ROOFLINE_SHAPE)
    roof = race.roofline_ms(ROOFLINE_SHAPE, "bfloat16", copy) if copy else None
    pairs = {f"roofline at {copy:,.0f} GB/s copy": (t, roof)} if t and roof else {}
    what = f"triton kernel ≤ {ROOFLINE_LIMIT:g}× the memory roofline at {ROOFLINE_SHAPE}"
    found.append(judge(what, pairs, ROOFLINE_LIMIT, True))
    return found


def junit_line(path: Path) -> str | None:
    """``- <stage>: N passed, …`` from a JUnit XML file, or None when the run left none whole."""
    with contextlib.suppress(OSError, ElementTree.ParseError):  # killed: none, or half of one
        cases = list(ElementTree.parse(path).getroot().iter("testcase"))
        failed = [c.get("name", "?") for c in cases if {x.tag for x in c} & {"failure", "error"}]
        skip = sum(c.find("skipped") is not None for c in cases)
        text = f"{len(cases) - len(failed) - skip} passed, {len(failed)} failed, {skip} skipped"
        return f"- {path.parent.name}: {text}" + (f" ({', '.join(failed)})" if failed else "")
    return None


def _records(out: Path, pattern: str) -> list[dict[str, str]]:
    found = []
    for path in sorted(out.glob(pattern)):
        with contextlib.suppress(OSError, ValueError):  # half-written by a killed stage
            found += read_csv(path)[1]
    return found


def write_page(out: Path) -> str:
    """Write ``<out>/gpu_report.md`` from the files under ``out``; return its text."""
    meta, done = read_csv(out / "stages.csv") if (out / "stages.csv").is_file() else ({}, [])
    rows, copy = read_rows(KernelRow, out, "*/race.csv"), race.read_copy(out / "bandwidth")
    meta["copy_bandwidth"] = "not measured" if copy is None else f"{copy:,.0f} GB/s (median)"
    found = targets(rows, _records(out, "model/*.csv"), _records(out, "decode/*.csv"), copy)
    stages = [[s["stage"], s["what"], s["status"], s["seconds"], s["note"]] for s in done]
    tests = [line for p in sorted(out.glob("*/*.xml")) if (line := junit_line(p))]
    parts = [
        f"# GPU report\n\n{markdown_meta(meta)}",
        "## Targets\n\n" + markdown_table(["target", "measured", "verdict"], found),
        "## Stages\n\n" + markdown_table(["stage", "what", "status", "s", "note"], stages),
        "## Tests\n\n" + ("\n".join(tests) or "No test results."),
    ]
    for folder in dict.fromkeys(n.partition("-N")[0] for n, *_ in STAGES):  # a level down
        for page in sorted(out.glob(f"{folder}/*.md")):
            if tables := page.read_text().partition("\n## ")[2].replace("\n## ", "\n### "):
                parts.append(f"## {folder}: `{folder}/{page.name}`\n\n### {tables.strip()}")
        parts += [f"![{p.stem}]({folder}/{p.name})" for p in sorted(out.glob(f"{folder}/*.png"))]
    text = "\n\n".join(parts) + "\n"
    (out / "gpu_report.md").write_text(text)
    return text


def build_parser() -> argparse.ArgumentParser:
    names = [name for name, *_ in STAGES]
    parser = argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("out/gpu_report"), help="result folder")
    parser.add_argument("--budget-min", type=float, default=8.0, help="minutes for all stages")
    parser.add_argument("--stages", nargs="+", choices=names, metavar="STAGE", help=" ".join(names))
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--page", type=Path, metavar="DIR", help="rebuild DIR's page, run nothing")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the stages within the budget, rewriting ``stages.csv`` and the page after each."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.budget_min <= 0:
        parser.error(f"--budget-min must be > 0, got {args.budget_min:g}")
    if args.page is not None and not args.page.is_dir():
        parser.error(f"--page {args.page}: not a folder (expected a gpu_report --out folder)")
    if args.page:
        print(write_page(args.page), end="")
        return 0
    out: Path = args.out.resolve()  # the stages run from the repository root
    chosen = [s for s in STAGES if args.stages is None or s[0] in args.stages]
    if args.dry_run:
        print("\n".join(f"# {n}: {w}\n{shlex.join(command(n, c, out))}" for n, _, w, c in chosen))
        return 0
    if not torch.cuda.is_available():
        parser.error("needs CUDA and torch.cuda.is_available() is False; --dry-run prints it")
    (out / "logs").mkdir(parents=True, exist_ok=True)
    # fla's first-call autotuning reduced (~4x fewer compilations) unless the caller set it.
    autotune = os.environ.get(fla_autotune.ENV) or "reduced"
    meta = provenance(argv, args.budget_min, autotune)
    env = {**os.environ, fla_autotune.ENV: autotune, FAILURES_AT_ONCE: "1"}
    results = [dict(stage=s[0], what=s[2], status="not run", seconds=0, note="") for s in chosen]
    deadline = time.monotonic() + args.budget_min * 60
    for (name, cap_s, _, line), result in zip(chosen, results, strict=True):
        began, log = time.monotonic(), out / "logs" / f"{name}.log"
        if (left := deadline - began) < START_SHARE * cap_s:
            result.update(status="skipped", note=f"{left:.0f} s left of the budget, cap {cap_s} s")
        else:
            print(f"gpu-report: {name}, up to {min(left, cap_s):.0f} s", file=sys.stderr)
            said = run(command(name, line, out), log, min(left, cap_s), env)
            note = "" if said == "done" else f"{said}; see logs/{name}.log"
            status = said if said in ("done", "timed out") else "failed"
            result.update(status=status, seconds=round(time.monotonic() - began), note=note)
        write_csv(out / "stages.csv", results, meta)
        write_page(out)
    print(write_page(out), end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
