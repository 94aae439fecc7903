"""The LoRA study: base, full fine-tuning and LoRA at every rank, over seeds, in one process.

    nice -n 19 python -m attn_lightning.studies.lora --part mlp
    nice -n 19 python -m attn_lightning.studies.lora --part variants   # after mlp
    nice -n 19 python -m attn_lightning.studies.lora --part transformer
    nice -n 19 python -m attn_lightning.studies.lora --part lrsweep    # the student's table
    python -m attn_lightning.studies.lora --part lrsweep --plan   # runs planned, time estimate
    python -m attn_lightning.studies.lora --part report     # tables only, from the CSVs

Every run is a ``train.py`` run of ``attn_lightning.studies.runner`` (in this process, so ~150
runs pay the import cost once); a variant is a name plus overrides on ``configs/lora`` or
``configs/lora_reversal``. ``mlp``: per seed, a base MLP on the original digits, then per shifted
domain its test accuracy before adaptation (``train.py test``, ``adaptation=full``), full
fine-tuning, LoRA and LoRA-from-scratch at every rank. ``transformer``: one reversal base
(``configs/reversal/base.yaml``, shortened), then per seed full fine-tuning, LoRA on
``q_proj``/``v_proj`` at the transformer ranks and LoRA from scratch. ``variants``: LoRA at
one rank with the head frozen, the head in ``modules_to_save``, or every bias trained.
``lrsweep``: the issue-15 protocol against the student's table, 3 learning rates per mode picked
on validation (``attn_lightning.studies.lora_lrsweep``). Each part appends its runs to
``<out>_<part>_runs.csv`` (``attn_lightning.studies.lora_runs``); ``report`` (also run after
each part) writes ``<out>.md`` and ``<out>_summary.csv`` via ``attn_lightning.studies.lora_report``.
This module builds the other parts' jobs and is the CLI.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections import Counter
from pathlib import Path

from attn_lightning.data.domains import NORMALIZATIONS
from attn_lightning.studies.lora_lrsweep import (
    HEADS,
    METHODS,
    SWEEP_LRS,
    lrsweep_all_jobs,
    run_lrsweep,
)
from attn_lightning.studies.lora_report import write_report
from attn_lightning.studies.lora_runs import (
    MLP_CONFIG,
    REV_CONFIG,
    REVERSAL_BASE,
    Job,
    checkpoint_path,
    pending,
    read_rows,
    run_part,
    runs_csv,
)
from attn_lightning.studies.runner import Variant

log = logging.getLogger("attn_lightning.studies.lora")
# --plan's estimate before any run is done: lrsweep fits on digits took 20-25 s at 60 epochs,
# 6 s when stopped early at 15, on 2 cores shared with other jobs (load ≈ 5).
SECONDS_PER_RUN = 20.0


def mlp_jobs(args: argparse.Namespace) -> list[Job]:
    """Per seed: the base MLP, then per domain before / full / LoRA / LoRA-from-scratch."""
    jobs: list[Job] = []
    lr = f"model.init_args.lr={args.lr}"
    shifts = (f"data.init_args.levels={args.levels}", f"data.init_args.angle={args.angle}")
    for seed in args.seeds:
        base = Variant("base-mlp", (MLP_CONFIG,), (lr, f"trainer.max_epochs={args.base_epochs}"))
        ckpt = checkpoint_path(args, base.name, seed)
        row = {"part": "mlp", "domain": "original", "method": "base", "rank": 0}
        jobs.append((base, seed, {**row, "_keep": str(ckpt)}))
        for domain in args.domains:
            adapt = (
                lr,
                *shifts,
                f"model.init_args.base_checkpoint={ckpt}",
                f"trainer.max_epochs={args.epochs}",
                "checkpoint.save_last=false",
                f"data.init_args.domain={domain}",
            )
            row = {"part": "mlp", "domain": domain, "rank": 0}
            full = (*adapt, "model.init_args.adaptation=full")
            before = Variant(f"{domain}-before", (MLP_CONFIG,), full, subcommand="test")
            jobs.append((before, seed, {**row, "method": "before"}))
            jobs.append(
                (Variant(f"{domain}-full", (MLP_CONFIG,), full), seed, {**row, "method": "full"})
            )
            for method in ("lora", "lora_scratch"):
                for r in args.ranks:
                    options = (
                        f"model.init_args.adaptation={method}",
                        f"model.init_args.lora_r={r}",
                    )
                    variant = Variant(f"{domain}-{method}-r{r}", (MLP_CONFIG,), (*adapt, *options))
                    jobs.append((variant, seed, {**row, "method": method, "rank": r}))
    return jobs


VARIANTS = {  # head and bias options of peft's LoraConfig, compared at one rank
    "lora_head_frozen": ("model.init_args.target_modules=[fc1, fc2]",),
    "lora_head_saved": (
        "model.init_args.target_modules=[fc1, fc2]",
        "model.init_args.modules_to_save=[fc3]",
    ),
    "lora_bias_all": ("model.init_args.lora_bias=all",),
}


def variant_jobs(args: argparse.Namespace) -> list[Job]:
    """LoRA at ``--variant-rank`` with the head frozen / trained whole, or biases trained.

    Needs the base checkpoints of ``--part mlp`` (same ``--work``, same seeds).
    """
    jobs: list[Job] = []
    r = args.variant_rank
    for seed in args.seeds:
        ckpt = checkpoint_path(args, "base-mlp", seed)
        for domain in args.variant_domains:
            common = (
                f"model.init_args.lr={args.lr}",
                f"data.init_args.domain={domain}",
                f"data.init_args.levels={args.levels}",
                f"data.init_args.angle={args.angle}",
                f"model.init_args.base_checkpoint={ckpt}",
                "checkpoint.save_last=false",
                f"trainer.max_epochs={args.epochs}",
                "model.init_args.adaptation=lora",
                f"model.init_args.lora_r={r}",
            )
            for method, options in VARIANTS.items():
                variant = Variant(f"{domain}-{method}-r{r}", (MLP_CONFIG,), (*common, *options))
                row = {"part": "variants", "domain": domain, "method": method, "rank": r}
                jobs.append((variant, seed, row))
    return jobs


def transformer_jobs(args: argparse.Namespace) -> list[Job]:
    """One reversal base (seed 0), then per seed before / full / LoRA / LoRA from scratch."""
    sizes = (
        f"data.init_args.seq_len={args.seq_len}",
        "model.init_args.max_len=32",
        "data.init_args.train_size=10000",
        "data.init_args.val_size=500",
        "data.init_args.test_size=500",
    )
    pretrain = (
        *sizes,
        f"trainer.max_steps={args.reversal_steps}",
        "trainer.val_check_interval=200",
        "model.init_args.generate_every_n_epochs=0",
    )
    base = Variant("base-reversal", (REVERSAL_BASE,), pretrain)
    row = {"part": "transformer", "domain": "reversal", "method": "base", "rank": 0}
    jobs: list[Job] = [(base, 0, {**row, "_keep": str(checkpoint_path(args, base.name, 0))})]
    common = (
        *sizes,
        f"model.init_args.base_checkpoint={checkpoint_path(args, base.name, 0)}",
        "checkpoint.save_last=false",
        f"trainer.max_steps={args.reversal_adapt_steps}",
    )
    for seed in args.seeds:
        row = {"part": "transformer", "domain": "reversal+1", "rank": 0}
        full = (*common, "model.init_args.adaptation=full", f"model.init_args.lr={args.lr_full}")
        before = Variant("rev-before", (REV_CONFIG,), full, subcommand="test")
        jobs.append((before, seed, {**row, "method": "before"}))
        jobs.append((Variant("rev-full", (REV_CONFIG,), full), seed, {**row, "method": "full"}))
        for method in ("lora", "lora_scratch"):
            for r in args.transformer_ranks:
                options = (
                    f"model.init_args.adaptation={method}",
                    f"model.init_args.lora_r={r}",
                    f"model.init_args.lr={args.lr_lora}",
                )
                variant = Variant(f"rev-{method}-r{r}", (REV_CONFIG,), (*common, *options))
                jobs.append((variant, seed, {**row, "method": method, "rank": r}))
    return jobs


def log_plan(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Log how many runs the part plans, how many are done, and a time estimate for the rest."""
    todo = jobs if args.fresh else pending(args, part, jobs)
    ok = [r for r in read_rows(runs_csv(args, part)) if r["status"] == "ok" and r["seconds"]]
    seconds = args.seconds_per_run
    source = "--seconds-per-run"
    if ok and not args.fresh:
        seconds = sum(float(r["seconds"]) for r in ok) / len(ok)
        source = f"mean of the {len(ok)} runs done"
    by_method = Counter(str(row["method"]) for _, _, row in jobs)
    log.info(
        "part %s: %d runs planned (%s), %d done, %d to run; ~%.0f s per run (%s): ~%.1f h",
        part,
        len(jobs),
        ", ".join(f"{n} {method}" for method, n in by_method.items()),
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


PARTS = {
    "mlp": mlp_jobs,
    "variants": variant_jobs,
    "transformer": transformer_jobs,
    "lrsweep": lrsweep_all_jobs,
}


def build_parser() -> argparse.ArgumentParser:
    """The LoRA study's CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.studies.lora",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--part", choices=(*PARTS, "report"), required=True)
    parser.add_argument("--out", default="docs/results/lora", help="CSV/markdown prefix")
    parser.add_argument("--work", default="sweeps/lora-study", help="logs, checkpoints, metrics")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--ranks", nargs="+", type=int, default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--domains", nargs="+", default=["quantized", "rotated", "inverted"])
    parser.add_argument("--levels", type=int, default=2, help="grey levels of 'quantized'")
    parser.add_argument("--angle", type=float, default=90.0, help="degrees of 'rotated'")
    parser.add_argument("--epochs", type=int, default=20, help="epochs of each adaptation")
    parser.add_argument("--base-epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.003, help="MLP runs (every adaptation)")
    parser.add_argument("--variant-rank", type=int, default=8)
    parser.add_argument("--variant-domains", nargs="+", default=["rotated", "inverted"])
    parser.add_argument("--transformer-ranks", nargs="+", type=int, default=[1, 4, 16])
    parser.add_argument("--seq-len", type=int, default=12)
    parser.add_argument("--reversal-steps", type=int, default=800)
    parser.add_argument("--reversal-adapt-steps", type=int, default=300)
    parser.add_argument("--lr-full", type=float, default=0.001)
    parser.add_argument("--lr-lora", type=float, default=0.01)
    sweep = parser.add_argument_group("lrsweep (issue 15: per-mode learning rates, on validation)")
    for mode, flag in zip(SWEEP_LRS, ("base", "full", "lora", "scratch"), strict=True):
        sweep.add_argument(
            f"--lrs-{flag}",
            nargs="+",
            type=_positive,
            default=SWEEP_LRS[mode],
            help=f"learning rates of the {mode} runs (default: %(default)s)",
        )
    sweep.add_argument(
        "--heads",
        nargs="+",
        choices=list(HEADS),
        default=["lora", "frozen"],
        help="the head in LoRA runs: adapted by LoRA (the student's), frozen, trained whole",
    )
    sweep.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS,
        default=list(METHODS),
        help="adaptation modes to run after the bases (a shard of the sweep)",
    )
    sweep.add_argument("--max-epochs", type=int, default=60)
    sweep.add_argument("--patience", type=int, default=10, help="val/loss epochs; 0: no stop")
    sweep.add_argument("--source", choices=("digits", "mnist"), default="digits")
    sweep.add_argument("--data-root", default="data", help="MNIST IDX files (source mnist)")
    sweep.add_argument(
        "--normalize",
        choices=NORMALIZATIONS,
        default="none",
        help="input normalisation after the shift (DomainImageDataModule's normalize)",
    )
    parser.add_argument("--plan", action="store_true", help="log the runs planned; run nothing")
    parser.add_argument(
        "--seconds-per-run", type=float, default=SECONDS_PER_RUN, help="--plan's estimate"
    )
    parser.add_argument("--keep-checkpoints", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="discard earlier rows of the part")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run one part of the LoRA study (or none, for ``report``), then write its tables."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("lightning", "lightning.pytorch", "lightning.fabric", "tensorboard"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.plan:
        if args.part not in PARTS:
            parser.error(f"--plan needs a part that runs ({', '.join(PARTS)}), not report")
        log_plan(args, args.part, PARTS[args.part](args))
        return
    if args.fresh and args.part in PARTS:
        runs_csv(args, args.part).unlink(missing_ok=True)
    if args.part in PARTS:
        start = time.perf_counter()
        if args.part == "lrsweep":
            run_lrsweep(args)
        else:
            run_part(args, args.part, PARTS[args.part](args))
        log.info("part %s: %.0f s of wall time", args.part, time.perf_counter() - start)
    write_report(Path(args.out))


if __name__ == "__main__":
    main()
