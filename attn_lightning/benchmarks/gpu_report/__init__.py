"""``gpu-report``: measure one GPU within a budget and pack the results into one archive.

    python -m attn_lightning.benchmark gpu-report --budget-minutes 20 --out out/gpu_report
    python -m attn_lightning.benchmark gpu-report --smoke --out out/gpu_smoke   # CPU, toy sizes

Runs, in order of value and within ``--budget-minutes`` (``plan``): the CUDA tests of the fla
kernel; one attention call (fwd, fwd+bwd; bf16 then fp32; causal and not; N = 1k … 64k at
B·N = 64k tokens and at B = 1; SDPA flash, every feature-map backend on ``implementation=torch``
and ``=fla``, and fla's own op as the anchor; peak memory); the reversal model's whole training
step at B·N = 64k tokens and at B = 1; decode per token vs the preallocated KV cache at 1k … 64k
tokens of context; the bf16-mixed training step of each experiment. Each stage is a child process
(``runner``) killed at its share of the budget, and SIGTERM/SIGINT stop the run, not the report.
It writes ``<out>/gpu_report.md`` (targets met or not, ``page``), the CSVs, markdown and figures
of every stage, the logs, ``versions.csv`` (Python, torch, CUDA, Triton, fla-core, the driver from
``nvidia-smi``) and packs them all into ``<out>/gpu_report.tar.gz``.

Without CUDA it refuses (one line) unless ``--smoke``: the same pipeline at toy sizes on the CPU,
fla's kernels skipped, to test the command itself. This process never touches the GPU: the
stages do, so a wedged kernel costs its stage only.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import logging
import os
import platform
import shutil
import subprocess
import tarfile
import time
from pathlib import Path

import torch

import attn_lightning
from attn_lightning.attention.ops import fla, fla_autotune
from attn_lightning.benchmarks.arguments import UsageError
from attn_lightning.benchmarks.gpu_report import page, plan
from attn_lightning.benchmarks.gpu_report.runner import Stage, run_stages
from attn_lightning.results import environment, write_csv

log = logging.getLogger(__name__)

PACKAGES = ("torch", "triton", "fla-core", "einops", "lightning", "numpy")
RESERVE_S = 30.0  # kept from the budget for the page and the archive
ARCHIVE = "gpu_report.tar.gz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``gpu-report``."""
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=20.0,
        help="wall-clock budget of the whole report, page and archive included (default 20)",
    )
    parser.add_argument("--out", type=Path, default=Path("out/gpu_report"), help="result folder")
    parser.add_argument(
        "--stages",
        nargs="+",
        default=None,
        metavar="STAGE",
        help="run only these stages, in the plan's order (default: all; a short lease may keep "
        "parity latency-bfloat16-tokens anchor latency-bfloat16-heads32 model-bfloat16 decode "
        "training)",
    )
    parser.add_argument(
        "--fla-autotune",
        choices=fla_autotune.MODES,
        default="full",
        help="fla's first-call autotuning in every stage: full (as installed) or reduced (4 "
        "warps, <= 3 stages: ~4x fewer compilations on a fresh machine; attention/ops/"
        "fla_autotune.py)",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="run the pipeline at toy sizes on the CPU (tests the command; no GPU results)",
    )


def versions() -> dict[str, str]:
    """Python, each of ``PACKAGES`` (installed version or ``not installed``) and torch's CUDA."""
    found = {"python": platform.python_version(), "torch CUDA": str(torch.version.cuda)}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def gpus() -> str:
    """``nvidia-smi``'s name, driver and memory of each GPU (no CUDA context is made here)."""
    query = ["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]
    if shutil.which("nvidia-smi") is None:
        return "nvidia-smi not found"
    try:
        done = subprocess.run(
            ["nvidia-smi", *query], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"nvidia-smi failed: {err}"
    return "; ".join(line.strip() for line in done.stdout.splitlines() if line.strip()) or (
        f"nvidia-smi said nothing (exit {done.returncode})"
    )


def pack(out: Path) -> Path:
    """Every file under ``out`` (but the archive) into ``<out>/gpu_report.tar.gz``."""
    archive = out / ARCHIVE
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path != archive:
                tar.add(path, arcname=str(Path(out.name) / path.relative_to(out)))
    return archive


def select(stages: list[Stage], names: list[str] | None) -> list[Stage]:
    """The stages named in ``names`` (all when None), in the plan's order.

    Raises:
        UsageError: a name that is not a stage of this plan (the message lists them).
    """
    if names is None:
        return stages
    known = [s.name for s in stages]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UsageError(f"--stages: unknown stage(s) {unknown}; this plan has: {' '.join(known)}")
    return [s for s in stages if s.name in names]


def run(args: argparse.Namespace) -> str:
    """Run the stages, write the page and the archive; return the page."""
    if args.budget_minutes <= 0:
        raise UsageError(f"--budget-minutes must be > 0, got {args.budget_minutes}")
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        raise UsageError(
            "gpu-report needs a CUDA device and torch.cuda.is_available() is False here; run it "
            "on a GPU machine, or add --smoke for a toy-size CPU run of the pipeline"
        )
    began = time.monotonic()
    out: Path = args.out.resolve()  # the stages run from the repository root
    out.mkdir(parents=True, exist_ok=True)
    root = Path(attn_lightning.__file__).resolve().parents[1]
    tests_root = root if (root / "tests").is_dir() else None
    minutes = args.budget_minutes
    stages = (
        plan.smoke_plan(out, tests_root) if args.smoke else plan.cuda_plan(out, minutes, tests_root)
    )
    stages = select(stages, args.stages)
    found = versions()
    missing = fla.missing_reason()
    if missing and not args.smoke:
        log.warning(
            "gpu-report: %s: the fla rows and the anchor will fail (%s)", missing, fla.INSTALL
        )
    write_csv(out / "versions.csv", [{"what": k, "version": v} for k, v in found.items()])
    budget_s = max(0.0, minutes * 60 - RESERVE_S)
    results, stopped = run_stages(
        stages,
        budget_s=budget_s,
        out=out,
        cwd=tests_root,
        min_stage_s=2 if args.smoke else 10,
        # Each stage applies it before fla's first kernel call (``fla.chunk_op``).
        env={**os.environ, fla_autotune.ENV: args.fla_autotune, plan.FAILURES_AT_ONCE: "1"},
    )
    # This process never opens the GPU: nvidia-smi describes it, ``environment`` the host.
    meta = environment(
        torch.device("cpu"),
        command=args.command_line,
        versions=", ".join(f"{k} {v}" for k, v in found.items()),
        fla=missing or "fla-core usable (its kernels: implementation=fla and the anchor)",
        fla_autotune=args.fla_autotune,
        stages=" ".join(args.stages) if args.stages else "all",
        budget_minutes=f"{minutes:g}",
        ran_s=f"{time.monotonic() - began:.0f}",
        stopped_by=stopped or "nothing (ran to its end or its budget)",
    )
    meta.pop("torch_threads", None)  # this process computes nothing
    meta = {
        "gpu": gpus() if cuda else "none (smoke run on the CPU)",
        "host": meta.pop("device"),
        **meta,
    }
    text = page.write_page(out, meta, results, smoke=args.smoke)
    archive = pack(out)
    log.info("gpu-report: wrote %s and %s", out / "gpu_report.md", archive)
    return text
