"""The LoRA study: base, full fine-tuning and LoRA at every rank, over seeds, in one process.

    nice -n 19 python -m attn_lightning.studies.lora --part mlp
    nice -n 19 python -m attn_lightning.studies.lora --part variants   # after mlp
    nice -n 19 python -m attn_lightning.studies.lora --part transformer
    python -m attn_lightning.studies.lora --part report     # tables only, from the CSVs

Every run is a ``train.py`` run (``attn_lightning.cli.main`` called in-process with the same
arguments, so ~150 runs pay the import cost once) from ``configs/lora`` or
``configs/lora_reversal``. ``mlp``: per seed, a base MLP on the original digits, then per shifted
domain its test accuracy before adaptation (``train.py test``, ``mode=full``), full fine-tuning,
LoRA and LoRA-from-scratch at every rank. ``transformer``: one reversal base
(``configs/reversal/base.yaml``, shortened), then per seed full fine-tuning, LoRA on
``q_proj``/``v_proj`` at the transformer ranks and LoRA from scratch. ``variants``: LoRA at
one rank with the head frozen, the head in ``modules_to_save``, or every bias trained. Each
part appends its runs to ``<out>_<part>_runs.csv``; ``report`` (also run after each part)
writes ``<out>.md`` and ``<out>_summary.csv`` via ``attn_lightning.studies.lora_report``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from attn_lightning.studies.lora_report import FIELDS, write_report

log = logging.getLogger("attn_lightning.lora_study")
ROOT = Path(__file__).resolve().parents[2]
MLP_CONFIG = ROOT / "configs" / "lora" / "base.yaml"
REV_CONFIG = ROOT / "configs" / "lora_reversal" / "base.yaml"
REVERSAL_BASE = ROOT / "configs" / "reversal" / "base.yaml"
QUIET = ("--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false")


class Runner:
    """Runs ``train.py`` in-process under ``work`` and appends one CSV row per run."""

    def __init__(self, args: argparse.Namespace, part: str) -> None:
        self.args, self.part = args, part
        self.work = Path(args.work)
        self.csv = Path(f"{args.out}_{part}_runs.csv")
        self.done: set[tuple[str, ...]] = set()
        if self.csv.exists() and not args.fresh:
            with self.csv.open() as f:
                self.done = {_key(row) for row in csv.DictReader(f) if row["status"] == "ok"}
        elif self.csv.exists():
            self.csv.unlink()

    def train(self, name: str, cli_args: list[str], subcommand: str = "fit") -> dict[str, Any]:
        from attn_lightning.cli import main

        metrics = self.work / "metrics" / f"{name}.json"
        metrics.unlink(missing_ok=True)
        args = [
            subcommand,
            *cli_args,
            *QUIET,
            "--experiment=lora-study",
            f"--run_name={name}",
            f"--metrics_file={metrics}",
            f"--trainer.logger.init_args.save_dir={self.work / 'logs'}",
            f"--checkpoint.root={self.work / 'checkpoints'}",
            "--sample_predictions.every_n_epochs=0",
        ]
        if subcommand == "fit":
            args.append("--test_after_fit=true")
        saved_argv, sys.argv = sys.argv, ["train.py"]
        try:
            main(args)
        finally:
            sys.argv = saved_argv
        return json.loads(metrics.read_text())

    def record(self, row: dict[str, Any], name: str, cli_args: list[str], sub: str = "fit") -> None:
        """Run unless an ok row with the same key exists; append the outcome to the CSV."""
        if _key({k: str(v) for k, v in row.items()}) in self.done:
            return
        start = time.perf_counter()
        try:
            result = self.train(name, cli_args, sub)
            test = result.get("test", {})
            row.update(
                status="ok",
                acc=test.get("test/acc", test.get("test/token_acc")),
                exact_acc=test.get("test/exact_acc"),
                trainable_params=int(test["test/trainable_params"])
                if "test/trainable_params" in test
                else "",  # the reversal task (the transformer's base) does not log it
            )
        except Exception as error:  # one failed run must not end a 30-minute study
            log.warning("run %s failed: %s: %s", name, type(error).__name__, error)
            row.update(status="crashed")
        row["seconds"] = round(time.perf_counter() - start, 1)
        if not self.args.keep_checkpoints and not name.startswith("base"):
            shutil.rmtree(self.work / "checkpoints" / "lora-study" / name, ignore_errors=True)
        new = not self.csv.exists()
        self.csv.parent.mkdir(parents=True, exist_ok=True)
        with self.csv.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=FIELDS, extrasaction="ignore")
            if new:
                writer.writeheader()
            writer.writerow(row)
        log.info("%-32s %-8s acc=%s (%.0f s)", name, row["status"], row.get("acc"), row["seconds"])


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[k]) for k in ("domain", "method", "rank", "seed"))


def run_mlp(args: argparse.Namespace) -> None:
    runner = Runner(args, "mlp")
    common = ["--config", str(MLP_CONFIG), f"--model.init_args.lr={args.lr}"]
    shifts = [f"--data.init_args.levels={args.levels}", f"--data.init_args.angle={args.angle}"]
    for seed in args.seeds:
        name = f"base-mlp-s{seed}"
        ckpt = runner.work / "checkpoints" / "lora-study" / name / "last.ckpt"
        seeded = [*common, f"--seed_everything={seed}"]
        base_row = {"part": "mlp", "domain": "original", "method": "base", "rank": 0, "seed": seed}
        if not ckpt.exists():
            runner.done.discard(_key({k: str(v) for k, v in base_row.items()}))
        runner.record(base_row, name, [*seeded, f"--trainer.max_epochs={args.base_epochs}"])
        adapt = [
            *seeded,
            *shifts,
            f"--model.init_args.base_checkpoint={ckpt}",
            f"--trainer.max_epochs={args.epochs}",
            "--checkpoint.save_last=false",
        ]
        for domain in args.domains:
            row = {"part": "mlp", "domain": domain, "rank": 0, "seed": seed}
            at = [*adapt, f"--data.init_args.domain={domain}"]
            full = [*at, "--model.init_args.mode=full"]
            runner.record({**row, "method": "before"}, f"{domain}-before-s{seed}", full, "test")
            runner.record({**row, "method": "full"}, f"{domain}-full-s{seed}", full)
            for method in ("lora", "lora_scratch"):
                for r in args.ranks:
                    runner.record(
                        {**row, "method": method, "rank": r},
                        f"{domain}-{method}-r{r}-s{seed}",
                        [*at, f"--model.init_args.mode={method}", f"--model.init_args.lora_r={r}"],
                    )


VARIANTS = {  # head and bias options of peft's LoraConfig, compared at one rank
    "lora_head_frozen": ["--model.init_args.target_modules=[fc1, fc2]"],
    "lora_head_saved": [
        "--model.init_args.target_modules=[fc1, fc2]",
        "--model.init_args.modules_to_save=[fc3]",
    ],
    "lora_bias_all": ["--model.init_args.lora_bias=all"],
}


def run_variants(args: argparse.Namespace) -> None:
    """LoRA at ``--variant-rank`` with the head frozen / trained whole, or biases trained.

    Needs the base checkpoints of ``--part mlp`` (same ``--work``, same seeds).
    """
    runner = Runner(args, "variants")
    for seed in args.seeds:
        ckpt = runner.work / "checkpoints" / "lora-study" / f"base-mlp-s{seed}" / "last.ckpt"
        for domain in args.variant_domains:
            common = ["--config", str(MLP_CONFIG), f"--model.init_args.lr={args.lr}"]
            common += [f"--seed_everything={seed}", f"--data.init_args.domain={domain}"]
            common += [
                f"--data.init_args.levels={args.levels}",
                f"--data.init_args.angle={args.angle}",
            ]
            common += [f"--model.init_args.base_checkpoint={ckpt}", "--checkpoint.save_last=false"]
            common += [f"--trainer.max_epochs={args.epochs}", "--model.init_args.mode=lora"]
            common += [f"--model.init_args.lora_r={args.variant_rank}"]
            for method, options in VARIANTS.items():
                runner.record(
                    {
                        "part": "variants",
                        "domain": domain,
                        "method": method,
                        "seed": seed,
                        "rank": args.variant_rank,
                    },
                    f"{domain}-{method}-r{args.variant_rank}-s{seed}",
                    [*common, *options],
                )


def run_transformer(args: argparse.Namespace) -> None:
    runner = Runner(args, "transformer")
    name = "base-reversal"
    ckpt = runner.work / "checkpoints" / "lora-study" / name / "last.ckpt"
    sizes = [f"--data.init_args.seq_len={args.seq_len}", "--model.init_args.max_len=32"]
    sizes += ["--data.init_args.train_size=10000", "--data.init_args.val_size=500"]
    sizes += ["--data.init_args.test_size=500"]
    base_row = {"part": "transformer", "domain": "reversal", "method": "base", "rank": 0, "seed": 0}
    if not ckpt.exists():
        runner.done.discard(_key({k: str(v) for k, v in base_row.items()}))
    pretrain = ["--config", str(REVERSAL_BASE), *sizes, "--seed_everything=0"]
    pretrain += [f"--trainer.max_steps={args.reversal_steps}", "--trainer.val_check_interval=200"]
    pretrain += ["--model.init_args.generate_every_n_epochs=0"]
    runner.record(base_row, name, pretrain)
    for seed in args.seeds:
        common = ["--config", str(REV_CONFIG), *sizes, f"--seed_everything={seed}"]
        common += [f"--model.init_args.base_checkpoint={ckpt}", "--checkpoint.save_last=false"]
        common += [f"--trainer.max_steps={args.reversal_adapt_steps}"]
        row = {"part": "transformer", "domain": "reversal+1", "rank": 0, "seed": seed}
        full = [
            *common,
            "--model.init_args.adaptation=full",
            f"--model.init_args.lr={args.lr_full}",
        ]
        runner.record({**row, "method": "before"}, f"rev-before-s{seed}", full, "test")
        runner.record({**row, "method": "full"}, f"rev-full-s{seed}", full)
        for method in ("lora", "lora_scratch"):
            for r in args.transformer_ranks:
                runner.record(
                    {**row, "method": method, "rank": r},
                    f"rev-{method}-r{r}-s{seed}",
                    [
                        *common,
                        f"--model.init_args.adaptation={method}",
                        f"--model.init_args.lora_r={r}",
                        f"--model.init_args.lr={args.lr_lora}",
                    ],
                )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m attn_lightning.studies.lora")
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
    parser.add_argument("--lr", type=float, default=0.003, help="MLP runs (every mode)")
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
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    start = time.perf_counter()
    if args.part == "mlp":
        run_mlp(args)
    elif args.part == "variants":
        run_variants(args)
    elif args.part == "transformer":
        run_transformer(args)
    if args.part != "report":
        log.info("part %s: %.0f s of wall time", args.part, time.perf_counter() - start)
    write_report(Path(args.out))


if __name__ == "__main__":
    main()
