"""``gpu-report``: the flags, the run (stages, page after each, archive) and the provenance.

See the package's doc (``gpu_report/__init__.py``) for what it measures and writes.
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
from collections.abc import Sequence
from pathlib import Path

import torch

import attn_lightning
from attn_lightning.attention.ops import fla, fla_autotune
from attn_lightning.records import environment, write_csv
from lab.benchmarks import gpu_report as package
from lab.benchmarks.arguments import UsageError
from lab.benchmarks.gpu_report import page, plan
from lab.benchmarks.gpu_report.runner import Stage, StageResult, run_stages

log = logging.getLogger(__name__)

PACKAGES = ("torch", "triton", "fla-core", "einops", "lightning", "numpy")
RESERVE_S = 15.0  # kept from the budget for a killed stage's grace, the page and the archive
ARCHIVE = "gpu_report.tar.gz"
DEFAULT_BUDGET_S = 480.0
DESCRIPTION = package.__doc__  # the command's --help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``gpu-report``."""
    parser.add_argument(
        "--budget-s",
        type=float,
        default=DEFAULT_BUDGET_S,
        help="wall-clock budget of the whole report in seconds, page and archive included "
        f"(default {DEFAULT_BUDGET_S:g}); a stage whose estimate does not fit in what is left is "
        "not started",
    )
    # The first report's spelling (docs/benchmarks.md shows the command as it ran): minutes.
    parser.add_argument("--budget-minutes", type=float, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, default=Path("out/gpu_report"), help="result folder")
    parser.add_argument(
        "--stages",
        nargs="+",
        default=None,
        metavar="STAGE",
        help="run only these stages, in the plan's order (default: all, as the budget allows: "
        "anchor kernels normaliser profile model decode kernels-64k parity latency training)",
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
        "--dry-run",
        "--smoke",
        action="store_true",
        dest="dry_run",
        help="run the pipeline at toy shapes on the CPU, the CUDA-only contenders noted as such "
        "(tests the command; no GPU results)",
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
    archive, partial = out / ARCHIVE, out / f".{ARCHIVE}.partial"
    with tarfile.open(partial, "w:gz") as tar:
        for path in sorted(out.rglob("*")):
            if path.is_file() and path not in (archive, partial):
                tar.add(path, arcname=str(Path(out.name) / path.relative_to(out)))
    partial.replace(archive)  # a run killed while packing keeps the previous archive whole
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
    """Run the stages, rewriting the page and the archive after each; return the last page."""
    if args.budget_minutes is not None:
        args.budget_s = args.budget_minutes * 60
    if args.budget_s <= 0:
        raise UsageError(f"--budget-s must be > 0, got {args.budget_s:g}")
    cuda = torch.cuda.is_available()
    if not cuda and not args.dry_run:
        raise UsageError(
            "gpu-report needs a CUDA device and torch.cuda.is_available() is False here; run it "
            "on a GPU machine, or add --dry-run for a toy-shape CPU run of the pipeline"
        )
    began = time.monotonic()
    out: Path = args.out.resolve()  # the stages run from the repository root
    out.mkdir(parents=True, exist_ok=True)
    root = Path(attn_lightning.__file__).resolve().parents[1]
    tests_root = root if (root / "tests").is_dir() else None
    make = plan.dry_plan if args.dry_run else plan.cuda_plan
    stages = select(make(out, tests_root), args.stages)
    found = versions()
    missing = fla.missing_reason()
    if missing and not args.dry_run:
        log.warning("gpu-report: %s: the fla rows will say so (%s)", missing, fla.INSTALL)
    write_csv(out / "versions.csv", [{"what": k, "version": v} for k, v in found.items()])
    stopped: str | None = None

    def write(results: Sequence[StageResult]) -> None:
        # This process never opens the GPU: nvidia-smi describes it, ``environment`` the host.
        meta = environment(
            torch.device("cpu"),
            command=args.command_line,
            versions=", ".join(f"{k} {v}" for k, v in found.items()),
            fla=missing or "fla-core usable",
            fla_autotune=args.fla_autotune,
            stages=" ".join(args.stages) if args.stages else "all",
            budget_s=f"{args.budget_s:g}",
            ran_s=f"{time.monotonic() - began:.0f}",
            stopped_by=stopped or "nothing (ran to its end or its budget)",
        )
        meta.pop("torch_threads", None)  # this process computes nothing
        meta = {
            "gpu": gpus() if cuda else "none (dry run on the CPU)",
            "host": meta.pop("device"),
            **meta,
        }
        done = {r.name for r in results}
        pending = [StageResult(s.name, s.what, "pending") for s in stages if s.name not in done]
        page.write_page(out, meta, [*results, *pending], dry_run=args.dry_run)
        pack(out)

    results, stopped = run_stages(
        stages,
        budget_s=max(0.0, args.budget_s - RESERVE_S),
        out=out,
        cwd=tests_root,
        # Each stage applies it before fla's first kernel call (``fla.chunk_op``).
        env={**os.environ, fla_autotune.ENV: args.fla_autotune, plan.FAILURES_AT_ONCE: "1"},
        after=write,
    )
    write(results)
    log.info("gpu-report: wrote %s and %s", out / "gpu_report.md", out / ARCHIVE)
    return (out / "gpu_report.md").read_text()
