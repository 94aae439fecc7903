"""The LoRA study: base, full fine-tuning and LoRA at every rank, over seeds, in one process.

    nice -n 19 python -m attn_lightning.studies.lora --part mlp
    nice -n 19 python -m attn_lightning.studies.lora --part variants   # after mlp
    nice -n 19 python -m attn_lightning.studies.lora --part transformer
    python -m attn_lightning.studies.lora --part report     # tables only, from the CSVs

Every run is a ``train.py`` run of ``attn_lightning.studies.runner`` (in this process, so ~150
runs pay the import cost once); a variant is a name plus overrides on ``configs/lora`` or
``configs/lora_reversal``. ``mlp``: per seed, a base MLP on the original digits, then per shifted
domain its test accuracy before adaptation (``train.py test``, ``adaptation=full``), full
fine-tuning, LoRA and LoRA-from-scratch at every rank. ``transformer``: one reversal base
(``configs/reversal/base.yaml``, shortened), then per seed full fine-tuning, LoRA on
``q_proj``/``v_proj`` at the transformer ranks and LoRA from scratch. ``variants``: LoRA at
one rank with the head frozen, the head in ``modules_to_save``, or every bias trained. Each
part appends its runs to ``<out>_<part>_runs.csv``; ``report`` (also run after each part)
writes ``<out>.md`` and ``<out>_summary.csv`` via ``attn_lightning.studies.lora_report``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from attn_lightning.studies.lora_report import FIELDS, write_report
from attn_lightning.studies.runner import ROOT, Runner, Variant, run_label
from attn_lightning.studies.tables import RunResult

log = logging.getLogger("attn_lightning.studies.lora")
MLP_CONFIG = str(ROOT / "configs" / "lora" / "base.yaml")
REV_CONFIG = str(ROOT / "configs" / "lora_reversal" / "base.yaml")
REVERSAL_BASE = str(ROOT / "configs" / "reversal" / "base.yaml")
EXPERIMENT = "lora-study"
# One planned run: the variant, its seed and its row keys (part, domain, method, rank).
Job = tuple[Variant, int, dict[str, Any]]


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[k]) for k in ("domain", "method", "rank", "seed"))


def _checkpoint(args: argparse.Namespace, variant: str, seed: int) -> Path:
    work = Path(args.work) / "checkpoints" / EXPERIMENT
    return work / f"{run_label(variant)}-s{seed}" / "last.ckpt"


def run_part(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Run a part's jobs in order, in this process, appending a row per run to its CSV.

    Jobs with an ok row in ``<out>_<part>_runs.csv`` are skipped (all rerun with ``--fresh``),
    except a base run whose checkpoint is gone: the runs after it load that checkpoint.
    """
    path = Path(f"{args.out}_{part}_runs.csv")
    done: set[tuple[str, ...]] = set()
    if path.exists() and args.fresh:
        path.unlink()
    elif path.exists():
        with path.open() as f:
            done = {_key(row) for row in csv.DictReader(f) if row["status"] == "ok"}
    todo = [
        (variant, seed, row)
        for variant, seed, row in jobs
        if _key({**row, "seed": seed}) not in done
        or (row["method"] == "base" and not _checkpoint(args, variant.name, seed).exists())
    ]
    rows = {(variant.name, seed): row for variant, seed, row in todo}
    work = Path(args.work)
    runner = Runner(
        overrides=(
            "trainer.enable_model_summary=false",
            f"trainer.logger.init_args.save_dir={work / 'logs'}",
            f"checkpoint.root={work / 'checkpoints'}",
            "sample_predictions.every_n_epochs=0",
        ),
        experiment=EXPERIMENT,
        runs_dir=work / "metrics",
        in_process=True,  # ~150 short runs: the imports are paid once
    )

    def record(result: RunResult, _: list[RunResult]) -> None:
        row = {**rows[(result.variant, result.seed)], "seed": result.seed}
        row.update(status="ok" if result.status == "ok" else "crashed")
        if result.status == "ok":
            params = result.value("test/trainable_params")  # not logged by the reversal base
            row.update(
                acc=result.metrics.get("test/acc", result.value("test/token_acc")),
                exact_acc=result.value("test/exact_acc"),
                trainable_params="" if params is None else int(params),
            )
        row["seconds"] = round(result.seconds or 0.0, 1)
        if not args.keep_checkpoints and row["method"] != "base":
            label = f"{run_label(result.variant)}-s{result.seed}"
            shutil.rmtree(work / "checkpoints" / EXPERIMENT / label, ignore_errors=True)
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(row)

    runner.run_all([(variant, seed) for variant, seed, _ in todo], on_result=record)


def mlp_jobs(args: argparse.Namespace) -> list[Job]:
    """Per seed: the base MLP, then per domain before / full / LoRA / LoRA-from-scratch."""
    jobs: list[Job] = []
    lr = f"model.init_args.lr={args.lr}"
    shifts = (f"data.init_args.levels={args.levels}", f"data.init_args.angle={args.angle}")
    for seed in args.seeds:
        base = Variant("base-mlp", (MLP_CONFIG,), (lr, f"trainer.max_epochs={args.base_epochs}"))
        jobs.append(
            (base, seed, {"part": "mlp", "domain": "original", "method": "base", "rank": 0})
        )
        ckpt = _checkpoint(args, base.name, seed)
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
        ckpt = _checkpoint(args, "base-mlp", seed)
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
    jobs: list[Job] = [(base, 0, row)]
    common = (
        *sizes,
        f"model.init_args.base_checkpoint={_checkpoint(args, base.name, 0)}",
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


PARTS = {"mlp": mlp_jobs, "variants": variant_jobs, "transformer": transformer_jobs}


def build_parser() -> argparse.ArgumentParser:
    """The LoRA study's CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.studies.lora",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--part", choices=("mlp", "variants", "transformer", "report"), required=True
    )
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
    parser.add_argument("--keep-checkpoints", action="store_true")
    parser.add_argument("--fresh", action="store_true", help="discard earlier rows of the part")
    return parser


def main(argv: list[str] | None = None) -> None:
    """Run one part of the LoRA study (or none, for ``report``), then write its tables."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    if args.part in PARTS:
        start = time.perf_counter()
        run_part(args, args.part, PARTS[args.part](args))
        log.info("part %s: %.0f s of wall time", args.part, time.perf_counter() - start)
    write_report(Path(args.out))


if __name__ == "__main__":
    main()
