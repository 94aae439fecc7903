"""The ``lrsweep`` part of the LoRA study (issue 15): its jobs and its protocol check.

Against the student's table: the base MLP at each base learning rate first
(``lrsweep_base_jobs``); then, from the base learning rate chosen on validation
(``chosen_base_lr``), per shifted domain the base before adaptation, full fine-tuning, LoRA and
LoRA from scratch, each mode at each of its learning rates (``lrsweep_jobs``), up to
``--max-epochs`` with early stopping. A part's CSV holds one data and epoch protocol
(``PROTOCOL``): ``check_protocol`` refuses to resume into another. ``studies.lora`` is the CLI.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from attn_lightning.studies.lora_lrsweep_report import choose_lr
from attn_lightning.studies.lora_runs import (
    MLP_CONFIG,
    Job,
    checkpoint_path,
    read_rows,
    run_part,
    runs_csv,
)
from attn_lightning.studies.runner import Variant

log = logging.getLogger("attn_lightning.studies.lora_lrsweep")
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
METHODS = ("before", "full", "lora", "lora_scratch")  # the adaptation modes, --methods
# One per lrsweep CSV (a CSV from before ``normalize`` existed reads as "none").
PROTOCOL = ("source", "levels", "angle", "normalize", "max_epochs", "patience")


def _lr(value: float) -> str:
    return f"{value:g}"  # the same string in job rows and in the CSV: resume compares them


def _sweep_common(args: argparse.Namespace) -> tuple[str, ...]:
    common = [
        f"data.init_args.source={args.source}",
        f"data.init_args.root={args.data_root}",
        f"data.init_args.levels={args.levels}",
        f"data.init_args.angle={args.angle}",
        f"data.init_args.normalize={args.normalize}",
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
            keep = str(checkpoint_path(args, variant.name, seed, "best"))
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
    validation (``None``: not known yet, for ``--plan``). ``--methods`` keeps a subset of the
    modes (``METHODS``), so that disjoint shards of the sweep can run side by side, each with its
    own ``--out`` and one shared ``--work`` holding the bases.
    """
    base = f"lrs-base-lr{base_lr or '?'}"
    methods = set(args.methods)
    specs: list[tuple[str, int, str, list[float]]] = [("full", 0, "", args.lrs_full)]
    for method, lrs in (("lora", args.lrs_lora), ("lora_scratch", args.lrs_scratch)):
        specs += [(method, r, head, lrs) for head in args.heads for r in args.ranks]
    specs = [spec for spec in specs if spec[0] in methods]
    jobs: list[Job] = []
    for domain in args.domains:
        common = (*_sweep_common(args), f"data.init_args.domain={domain}")
        for seed in args.seeds if "before" in methods else ():
            ckpt = f"model.init_args.base_checkpoint={checkpoint_path(args, base, seed, 'best')}"
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
                    path = checkpoint_path(args, base, seed, "best")
                    load = (f"model.init_args.base_checkpoint={path}",) if from_base else ()
                    variant = Variant(name, (MLP_CONFIG,), (*options, *load))
                    jobs.append((variant, seed, row))
    return jobs


def chosen_base_lr(args: argparse.Namespace) -> str | None:
    """The base learning rate with the best mean validation accuracy (None: no base run yet)."""
    lrs, seeds = {_lr(lr) for lr in args.lrs_base}, {str(s) for s in args.seeds}
    rows = [
        r
        for r in read_rows(runs_csv(args, "lrsweep"))
        if r["method"] == "base" and r["lr"] in lrs and r["seed"] in seeds
    ]
    return next((choice.lr for choice in choose_lr(rows).values()), None)


def check_protocol(args: argparse.Namespace) -> None:
    """ValueError when the lrsweep CSV holds runs of another data or epoch protocol."""
    path = runs_csv(args, "lrsweep")
    ours = tuple(str(getattr(args, k)) for k in PROTOCOL)
    for row in read_rows(path):
        theirs = tuple(row.get(k) or ("none" if k == "normalize" else "") for k in PROTOCOL)
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
        raise RuntimeError(
            f"no base run of the lr sweep finished (see {runs_csv(args, 'lrsweep')})"
        )
    log.info("base learning rate chosen on validation: %s", base_lr)
    run_part(args, "lrsweep", lrsweep_jobs(args, base_lr))
