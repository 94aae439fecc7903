"""The LoRA study: base, full fine-tuning and LoRA at every rank, over seeds, in one process.

    nice -n 19 python -m lab.studies.lora mlp
    nice -n 19 python -m lab.studies.lora variants      # after mlp
    nice -n 19 python -m lab.studies.lora transformer
    nice -n 19 python -m lab.studies.lora lrsweep       # the student's table
    python -m lab.studies.lora lrsweep --plan   # runs planned, time estimate
    python -m lab.studies.lora report           # tables only, from the records

Every run is a ``train.py`` run of ``studies.runner`` in this process (~150 runs pay the imports
once). Each part commits its finished runs as run records under ``<out>/runs/<part>/``: a part
continued on another machine trains only the runs without an ok record there. ``report`` (also
run after each part) writes the page and CSVs from those records alone.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from attn_lightning.data.domains import NORMALIZATIONS
from attn_lightning.data.images import SOURCES
from lab.results.records import OK
from lab.studies.arguments import log_to_stderr, study_parser
from lab.studies.lora.jobs import mlp_jobs, transformer_jobs, variant_jobs
from lab.studies.lora.lrsweep import (
    ADAPTATIONS,
    HEADS,
    LRS_FLAGS,
    SWEEP_LRS,
    check_protocol,
    lrsweep_all_jobs,
    run_lrsweep,
)
from lab.studies.lora.report import write_report
from lab.studies.lora.runs import Job, load_part, part_dir, pending, run_part

log = logging.getLogger("lab.studies.lora")
PROG = "python -m lab.studies.lora"
# --plan's estimate before any run is done: lrsweep fits on digits took 20-25 s at 60 epochs,
# 6 s when stopped early at 15, on 2 cores shared with other jobs (load ≈ 5).
SECONDS_PER_RUN = 20.0
PARTS: dict[str, Callable[[argparse.Namespace], list[Job]]] = {
    "mlp": mlp_jobs,
    "variants": variant_jobs,
    "transformer": transformer_jobs,
    "lrsweep": lrsweep_all_jobs,
}


def log_plan(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Log how many runs the part plans, how many are done, and a time estimate for the rest."""
    todo = jobs if args.fresh else pending(args, part, jobs)
    done = [r.seconds or 0.0 for r in load_part(args.out, part) if r.status == OK and r.seconds]
    seconds, source = args.seconds_per_run, "--seconds-per-run"
    if done and not args.fresh:
        seconds, source = sum(done) / len(done), f"mean of the {len(done)} runs done"
    planned = Counter(str(info["adaptation"]) for _, _, info in jobs)
    log.info(
        "part %s: %d runs planned (%s), %d done, %d to run; ~%.0f s per run (%s): ~%.1f h",
        part,
        len(jobs),
        ", ".join(f"{n} {adaptation}" for adaptation, n in planned.items()),
        len(jobs) - len(todo),
        len(todo),
        seconds,
        source,
        len(todo) * seconds / 3600,
    )


def _positive(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"a learning rate must be > 0, got {text!r}")
    return value


def _add_lrsweep(sweep: argparse.ArgumentParser) -> None:
    group = sweep.add_argument_group("learning rates per adaptation, chosen on validation")
    for adaptation, flag in LRS_FLAGS.items():
        group.add_argument(
            f"--lrs-{flag}",
            nargs="+",
            type=_positive,
            default=SWEEP_LRS[adaptation],
            help=f"learning rates of the {adaptation} runs (default: %(default)s)",
        )
    group.add_argument(
        "--heads",
        nargs="+",
        choices=list(HEADS),
        default=["lora", "frozen"],
        help="the head in LoRA runs: adapted by LoRA (the student's), frozen, trained whole",
    )
    group.add_argument(
        "--adaptations",
        nargs="+",
        choices=ADAPTATIONS,
        default=list(ADAPTATIONS),
        help="adaptations to run after the bases (a shard of the sweep)",
    )
    group.add_argument("--max-epochs", type=int, default=60)
    group.add_argument("--patience", type=int, default=10, help="val/loss epochs; 0: no stop")
    group.add_argument("--source", choices=SOURCES, default="digits")
    group.add_argument("--data-root", default="data", help="MNIST IDX files (source mnist)")
    group.add_argument(
        "--normalize",
        choices=NORMALIZATIONS,
        default="none",
        help="input normalisation after the shift (DomainImageDataModule's normalize)",
    )


def build_parser() -> argparse.ArgumentParser:
    """The LoRA study's CLI: one subcommand per part, and ``report`` (see the module docstring)."""
    parser = study_parser(PROG, __doc__)
    names = "{" + ",".join([*PARTS, "report"]) + "}"
    parts = parser.add_subparsers(dest="part", required=True, metavar=names)
    # The option groups the parts share, as parent parsers.
    out, runs, shifts, mlp_lr, grid = (argparse.ArgumentParser(add_help=False) for _ in range(5))
    out.add_argument(
        "--out", default="docs/results/lora", help="records (<out>/runs/), CSV/markdown prefix"
    )
    runs.add_argument("--work", default="sweeps/lora-study", help="logs, checkpoints, metrics")
    runs.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    runs.add_argument("--plan", action="store_true", help="log the runs planned; run nothing")
    runs.add_argument(
        "--seconds-per-run", type=float, default=SECONDS_PER_RUN, help="--plan's estimate"
    )
    runs.add_argument("--keep-checkpoints", action="store_true")
    runs.add_argument("--fresh", action="store_true", help="discard earlier runs of the part")
    shifts.add_argument("--levels", type=int, default=2, help="grey levels of 'quantized'")
    shifts.add_argument("--angle", type=float, default=90.0, help="degrees of 'rotated'")
    mlp_lr.add_argument("--epochs", type=int, default=20, help="epochs of each adaptation")
    mlp_lr.add_argument("--lr", type=float, default=0.003, help="MLP runs (every adaptation)")
    grid.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    grid.add_argument("--domains", nargs="+", default=["quantized", "rotated", "inverted"])
    mlp = parts.add_parser(
        "mlp",
        parents=[out, runs, shifts, mlp_lr, grid],
        help="a base MLP on digits, adapted to shifted digits at every rank",
    )
    mlp.add_argument("--base-epochs", type=int, default=30)
    variants = parts.add_parser(
        "variants",
        parents=[out, runs, shifts, mlp_lr],
        help="LoRA's head and bias options at one rank (after mlp)",
    )
    variants.add_argument("--variant-rank", type=int, default=8)
    variants.add_argument("--variant-domains", nargs="+", default=["rotated", "inverted"])
    transformer = parts.add_parser(
        "transformer", parents=[out, runs], help="LoRA on a reversal transformer's q_proj/v_proj"
    )
    transformer.add_argument("--transformer-ranks", nargs="+", type=int, default=[1, 4, 16])
    transformer.add_argument("--seq-len", type=int, default=12)
    transformer.add_argument("--reversal-steps", type=int, default=800)
    transformer.add_argument("--reversal-adapt-steps", type=int, default=300)
    transformer.add_argument("--lr-full", type=float, default=0.001)
    transformer.add_argument("--lr-lora", type=float, default=0.01)
    sweep = parts.add_parser(
        "lrsweep",
        parents=[out, runs, shifts, grid],
        help="the student's table: learning rates per adaptation, chosen on validation",
    )
    _add_lrsweep(sweep)
    parts.add_parser("report", parents=[out], help="the tables from the run records")
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    """Run one part of the LoRA study (or none, for ``report``), then write its tables."""
    log_to_stderr()
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.part == "lrsweep" and not args.fresh:  # --fresh discards the records it checks
        try:
            check_protocol(args)
        except ValueError as error:  # records of another protocol: a usage error naming both
            parser.error(str(error))
    if args.part in PARTS:
        if args.plan:
            log_plan(args, args.part, PARTS[args.part](args))
            return
        if args.fresh:
            shutil.rmtree(part_dir(args.out, args.part), ignore_errors=True)
        start = time.perf_counter()
        if args.part == "lrsweep":
            run_lrsweep(args)
        else:
            run_part(args, args.part, PARTS[args.part](args))
        log.info("part %s: %.0f s of wall time", args.part, time.perf_counter() - start)
    write_report(Path(args.out))
