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
on validation (``lrsweep_base_jobs``, ``lrsweep_jobs``). Each part appends its runs to
``<out>_<part>_runs.csv``; ``report`` (also run after each part) writes ``<out>.md`` and
``<out>_summary.csv`` via ``attn_lightning.studies.lora_report``.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from attn_lightning.studies.lora_report import (
    FIELDS,
    SWEEP_FIELDS,
    SWEEP_KEY,
    choose_lr,
    read_rows,
    write_report,
)
from attn_lightning.studies.runner import ROOT, Runner, Variant, run_label, run_name
from attn_lightning.studies.tables import RunResult

log = logging.getLogger("attn_lightning.studies.lora")
MLP_CONFIG = str(ROOT / "configs" / "lora" / "base.yaml")
REV_CONFIG = str(ROOT / "configs" / "lora_reversal" / "base.yaml")
REVERSAL_BASE = str(ROOT / "configs" / "reversal" / "base.yaml")
EXPERIMENT = "lora-study"
# --plan's estimate before any run is done: lrsweep fits on digits took 20-25 s at 60 epochs,
# 6 s when stopped early at 15, on 2 cores shared with other jobs (load ≈ 5).
SECONDS_PER_RUN = 20.0
# One planned run: the variant, its seed and its row keys (part, domain, method, rank, ...). A
# row's "_keep" (not written) names a checkpoint later runs load: kept, and the run is redone
# when it is gone even though its CSV row is ok.
Job = tuple[Variant, int, dict[str, Any]]
KEYS = ("domain", "method", "rank", "seed")  # what makes a row "the same run" on resume
PART_KEYS = {"lrsweep": SWEEP_KEY}
PART_FIELDS = {"lrsweep": SWEEP_FIELDS}


def _key(row: dict[str, Any], part: str = "mlp") -> tuple[str, ...]:
    return tuple(str(row[k]) for k in PART_KEYS.get(part, KEYS))


def _csv(args: argparse.Namespace, part: str) -> Path:
    return Path(f"{args.out}_{part}_runs.csv")


def _checkpoint(args: argparse.Namespace, variant: str, seed: int, name: str = "last") -> Path:
    work = Path(args.work) / "checkpoints" / EXPERIMENT
    return work / f"{run_label(variant)}-s{seed}" / f"{name}.ckpt"


def pending(args: argparse.Namespace, part: str, jobs: list[Job]) -> list[Job]:
    """The jobs still to run: no ok row in the part's CSV, or their ``_keep`` checkpoint gone."""
    done: set[tuple[str, ...]] = set()
    if _csv(args, part).exists():
        with _csv(args, part).open() as f:
            done = {_key(row, part) for row in csv.DictReader(f) if row["status"] == "ok"}
    return [
        (variant, seed, row)
        for variant, seed, row in jobs
        if _key({**row, "seed": seed}, part) not in done
        or ("_keep" in row and not Path(row["_keep"]).exists())
    ]


def best_validation(log_dir: Path, monitor: str = "val/loss") -> dict[str, Any]:
    """``val_loss``, ``val_acc`` and ``best_epoch`` (1-based) at the lowest ``monitor``.

    Read from the run's TensorBoard events: the fit's metrics file has only the last epoch's
    values, and the tested checkpoint is the best one (``checkpoint.monitor``, first minimum,
    as ``ModelCheckpoint`` keeps it). Empty when the run logged no ``monitor`` (or no logs).
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    if not log_dir.is_dir():
        return {}
    events = EventAccumulator(str(log_dir), size_guidance={"scalars": 0})
    events.Reload()
    tags = events.Tags()["scalars"]
    if monitor not in tags:
        return {}
    losses = events.Scalars(monitor)
    accuracy = {e.step: e.value for e in events.Scalars("val/acc")} if "val/acc" in tags else {}
    best = min(range(len(losses)), key=lambda i: losses[i].value)
    return {
        "val_loss": losses[best].value,
        "val_acc": accuracy.get(losses[best].step, ""),
        "best_epoch": best + 1,  # one validation per epoch
    }


def _fit_details(metrics_file: Path) -> dict[str, Any]:
    # Epochs trained (trainer.current_epoch after fit: max_epochs, or fewer if stopped early)
    # and the validation metrics of the tested checkpoint; nothing for a test-only run.
    if not metrics_file.exists():
        return {}
    record = json.loads(metrics_file.read_text())
    details: dict[str, Any] = {}
    if record.get("epoch") is not None:
        details["epochs"] = record["epoch"]
    if record.get("log_dir"):
        details.update(best_validation(Path(record["log_dir"])))
    return details


def run_part(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Run a part's jobs in order, in this process, appending a row per run to its CSV.

    Jobs with an ok row in ``<out>_<part>_runs.csv`` are skipped (``--fresh`` removes the CSV
    first, in ``main``), except those whose ``_keep`` checkpoint is gone: later runs load it.
    """
    path = _csv(args, part)
    fields = PART_FIELDS.get(part, FIELDS)
    todo = pending(args, part, jobs)
    rows = {(variant.name, seed): row for variant, seed, row in todo}
    work = Path(args.work)
    for variant, seed, _ in todo:  # a rerun's earlier folders: train.py refuses to reuse them
        for folder in ("logs", "checkpoints"):
            shutil.rmtree(work / folder / EXPERIMENT / run_name(variant, seed), ignore_errors=True)
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
        label = f"{run_label(result.variant)}-s{result.seed}"
        if result.status == "ok":
            params = result.value("test/trainable_params")  # not logged by the reversal base
            row.update(
                acc=result.metrics.get("test/acc", result.value("test/token_acc")),
                exact_acc=result.value("test/exact_acc"),
                trainable_params="" if params is None else int(params),
            )
            if "val_acc" in fields:
                row.update(_fit_details(work / "metrics" / f"{label}.json"))
        row["seconds"] = round(result.seconds or 0.0, 1)
        if not args.keep_checkpoints and "_keep" not in row:
            shutil.rmtree(work / "checkpoints" / EXPERIMENT / label, ignore_errors=True)
        new = not path.exists()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
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
        ckpt = _checkpoint(args, base.name, seed)
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
    jobs: list[Job] = [(base, 0, {**row, "_keep": str(_checkpoint(args, base.name, 0))})]
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


SWEEP_LRS = {  # per-mode learning-rate grids, the defaults of --lrs-<mode>
    "base": [1e-3, 3e-3, 1e-2],
    "full": [3e-4, 1e-3, 3e-3],  # every weight moves: smaller steps
    "lora": [1e-3, 3e-3, 1e-2],
    "lora_scratch": [1e-3, 3e-3, 1e-2],
}
HEADS = {  # the head (fc3) in a LoRA run; the student's "LoRA on all three layers" is "lora"
    "lora": ("model.init_args.target_modules=[fc1, fc2, fc3]",),  # adapted by LoRA: 1,050·r
    "frozen": ("model.init_args.target_modules=[fc1, fc2]",),  # not adapted: 976·r
    "trained": (  # trained whole (peft modules_to_save): 976·r + 650
        "model.init_args.target_modules=[fc1, fc2]",
        "model.init_args.modules_to_save=[fc3]",
    ),
}
PROTOCOL = ("source", "levels", "angle", "max_epochs", "patience")  # one per lrsweep CSV


def _lr(value: float) -> str:
    return f"{value:g}"  # the same string in job rows and in the CSV: resume compares them


def _sweep_common(args: argparse.Namespace) -> tuple[str, ...]:
    common = [
        f"data.init_args.source={args.source}",
        f"data.init_args.root={args.data_root}",
        f"data.init_args.levels={args.levels}",
        f"data.init_args.angle={args.angle}",
        f"trainer.max_epochs={args.max_epochs}",
        "checkpoint.filename=best",  # the best val/loss checkpoint: tested, and adapted from
        "checkpoint.save_last=false",
    ]
    if args.patience > 0:
        stop = {
            "class_path": "lightning.pytorch.callbacks.EarlyStopping",
            "init_args": {"monitor": "val/loss", "mode": "min", "patience": args.patience},
        }
        common.append(f"trainer.callbacks={json.dumps([stop])}")
    return tuple(common)


def _sweep_row(args: argparse.Namespace, **row: Any) -> dict[str, Any]:
    protocol = {k: getattr(args, k) for k in PROTOCOL}
    return {"part": "lrsweep", **protocol, "rank": 0, "head": "", "base_lr": "", **row}


def lrsweep_base_jobs(args: argparse.Namespace) -> list[Job]:
    """The base MLP on the original domain at each ``--lrs-base``, per seed (checkpoints kept)."""
    jobs: list[Job] = []
    for lr in args.lrs_base:
        options = (
            *_sweep_common(args),
            f"model.init_args.lr={lr}",
            "data.init_args.domain=original",
        )
        variant = Variant(f"lrs-base-lr{_lr(lr)}", (MLP_CONFIG,), options)
        for seed in args.seeds:
            keep = str(_checkpoint(args, variant.name, seed, "best"))
            row = _sweep_row(args, domain="original", method="base", lr=_lr(lr), _keep=keep)
            jobs.append((variant, seed, row))
    return jobs


def lrsweep_jobs(args: argparse.Namespace, base_lr: str | None) -> list[Job]:
    """Per domain: the base before adaptation, full fine-tuning, LoRA and LoRA from scratch.

    Each mode at each of its learning rates, per seed, up to ``--max-epochs`` with early stopping
    on ``val/loss`` (``--patience``); LoRA per head setting (``HEADS``) and rank. "With and
    without the head adapted" is ``lora`` (LoRA on fc3 too: the student's "LoRA on all three
    layers", 1,050·r parameters) against ``frozen`` (LoRA on fc1, fc2 only); ``trained`` (fc3
    trained whole, best in the ``variants`` part) is opt-in through ``--heads``. Every run but
    LoRA from scratch starts from seed s's base at ``base_lr``, the base learning rate chosen on
    validation (``None``: not known yet, for ``--plan``).
    """
    base = f"lrs-base-lr{base_lr or '?'}"
    specs: list[tuple[str, int, str, list[float]]] = [("full", 0, "", args.lrs_full)]
    for method, lrs in (("lora", args.lrs_lora), ("lora_scratch", args.lrs_scratch)):
        specs += [(method, r, head, lrs) for head in args.heads for r in args.ranks]
    jobs: list[Job] = []
    for domain in args.domains:
        common = (*_sweep_common(args), f"data.init_args.domain={domain}")
        for seed in args.seeds:
            ckpt = f"model.init_args.base_checkpoint={_checkpoint(args, base, seed, 'best')}"
            before = (*common, ckpt, "model.init_args.adaptation=full")
            variant = Variant(f"lrs-{domain}-before", (MLP_CONFIG,), before, subcommand="test")
            row = _sweep_row(args, domain=domain, method="before", lr="", base_lr=base_lr or "?")
            jobs.append((variant, seed, row))
        for method, r, head, lrs in specs:
            from_base = method != "lora_scratch"
            for lr in lrs:
                name = f"lrs-{domain}-{method}" + (f"-r{r}-h{head}" if r else "") + f"-lr{_lr(lr)}"
                options = [
                    *common,
                    f"model.init_args.adaptation={method}",
                    f"model.init_args.lr={lr}",
                ]
                if r:
                    options += [f"model.init_args.lora_r={r}", *HEADS[head]]
                row = _sweep_row(args, domain=domain, method=method, rank=r, head=head, lr=_lr(lr))
                row["base_lr"] = (base_lr or "?") if from_base else ""
                for seed in args.seeds:
                    path = _checkpoint(args, base, seed, "best")
                    load = (f"model.init_args.base_checkpoint={path}",) if from_base else ()
                    variant = Variant(name, (MLP_CONFIG,), (*options, *load))
                    jobs.append((variant, seed, row))
    return jobs


def chosen_base_lr(args: argparse.Namespace) -> str | None:
    """The base learning rate with the best mean validation accuracy (None: no base run yet)."""
    lrs, seeds = {_lr(lr) for lr in args.lrs_base}, {str(s) for s in args.seeds}
    rows = [
        r
        for r in read_rows(_csv(args, "lrsweep"))
        if r["method"] == "base" and r["lr"] in lrs and r["seed"] in seeds
    ]
    return next((choice.lr for choice in choose_lr(rows).values()), None)


def check_protocol(args: argparse.Namespace) -> None:
    """ValueError when the lrsweep CSV holds runs of another data or epoch protocol."""
    path = _csv(args, "lrsweep")
    ours = tuple(str(getattr(args, k)) for k in PROTOCOL)
    for row in read_rows(path):
        theirs = tuple(row[k] for k in PROTOCOL)
        if theirs != ours:
            raise ValueError(
                f"{path} holds runs with {dict(zip(PROTOCOL, theirs, strict=True))}, not "
                f"{dict(zip(PROTOCOL, ours, strict=True))}: resuming would mix them; give "
                f"another --out (and --work) or --fresh"
            )


def lrsweep_all_jobs(args: argparse.Namespace) -> list[Job]:
    """Every run of the part, the adaptations from the base chosen so far (for ``--plan``)."""
    if not args.fresh:  # --fresh would discard the CSV: neither its protocol nor its base count
        check_protocol(args)
    base_lr = None if args.fresh else chosen_base_lr(args)
    return [*lrsweep_base_jobs(args), *lrsweep_jobs(args, base_lr)]


def run_lrsweep(args: argparse.Namespace) -> None:
    """The bases first; then, from the base learning rate chosen on validation, the rest."""
    check_protocol(args)
    run_part(args, "lrsweep", lrsweep_base_jobs(args))
    base_lr = chosen_base_lr(args)
    if base_lr is None:
        raise RuntimeError(f"no base run of the lr sweep finished (see {_csv(args, 'lrsweep')})")
    log.info("base learning rate chosen on validation: %s", base_lr)
    run_part(args, "lrsweep", lrsweep_jobs(args, base_lr))


def log_plan(args: argparse.Namespace, part: str, jobs: list[Job]) -> None:
    """Log how many runs the part plans, how many are done, and a time estimate for the rest."""
    todo = jobs if args.fresh else pending(args, part, jobs)
    ok = [r for r in read_rows(_csv(args, part)) if r["status"] == "ok" and r["seconds"]]
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
    sweep.add_argument("--max-epochs", type=int, default=60)
    sweep.add_argument("--patience", type=int, default=10, help="val/loss epochs; 0: no stop")
    sweep.add_argument("--source", choices=("digits", "mnist"), default="digits")
    sweep.add_argument("--data-root", default="data", help="MNIST IDX files (source mnist)")
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
        _csv(args, args.part).unlink(missing_ok=True)
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
