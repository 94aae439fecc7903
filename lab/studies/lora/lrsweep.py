"""The ``lrsweep`` part of the LoRA study, against the student's table: the bases at each
learning rate first, then every adaptation at each of its learning rates from the base chosen
on validation. A part's records hold one data and epoch protocol (``runs.PROTOCOL``):
``check_protocol`` refuses to resume into another.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from lab.studies.lora.lrsweep_report import current_sweep
from lab.studies.lora.runs import (
    BASE_WEIGHTS,
    MLP_CONFIG,
    PROTOCOL,
    Job,
    checkpoint_path,
    load_part,
    part_dir,
    run_part,
)
from lab.studies.runner import SEED, Variant

log = logging.getLogger("lab.studies.lora")
# Per-adaptation learning-rate grids, the defaults of --lrs-<adaptation>. Widened from the first
# 3-rate grids where mnist5k's choices sat at an edge: the base and every full
# fine-tune chose the top rate (one above, now interior), LoRA rows the top (two above) or the
# bottom (one below), LoRA from scratch rows the top (two above).
SWEEP_LRS = {
    "base": [1e-3, 3e-3, 1e-2, 3e-2],
    "full": [3e-4, 1e-3, 3e-3, 1e-2],  # every weight moves: smaller steps
    "lora": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
    "lora_scratch": [1e-3, 3e-3, 1e-2, 3e-2, 1e-1],
}
LRS_FLAGS = {"base": "base", "full": "full", "lora": "lora", "lora_scratch": "scratch"}
HEADS = {  # the head (fc3) in a LoRA run; the student's "LoRA on all three layers" is "lora"
    "lora": ("model.init_args.target_modules=[fc1, fc2, fc3]",),  # adapted by LoRA: 1,050·r
    "frozen": ("model.init_args.target_modules=[fc1, fc2]",),  # not adapted: 976·r
    "trained": (  # trained whole (peft modules_to_save): 976·r + 650
        "model.init_args.target_modules=[fc1, fc2]",
        "model.init_args.modules_to_save=[fc3]",
    ),
}
ADAPTATIONS = ("before", "full", "lora", "lora_scratch")  # run after the bases, --adaptations


def _lr(value: float) -> str:
    return f"{value:g}"  # the same string in variant names and in the records' lr tags


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


def _sweep_info(args: argparse.Namespace, **info: Any) -> dict[str, Any]:
    protocol = {k: getattr(args, k) for k in PROTOCOL}
    return {"part": "lrsweep", **protocol, "rank": 0, "head": "", "base_lr": "", **info}


def lrsweep_base_jobs(args: argparse.Namespace) -> list[Job]:
    """The base MLP on the original domain at each ``--lrs-base``, per seed (checkpoints kept)."""
    jobs: list[Job] = []
    for lr in args.lrs_base:
        options = (*_sweep_common(args), f"model.init_args.lr={lr}")
        options += ("data.init_args.domain=original",)
        variant = Variant(f"lrs-base-lr{_lr(lr)}", (MLP_CONFIG,), options)
        for seed in args.seeds:
            keep = str(checkpoint_path(args.work, variant.name, seed, "best"))
            info = _sweep_info(args, domain="original", adaptation="base", lr=_lr(lr), _keep=keep)
            jobs.append((variant, seed, info))
    return jobs


def lrsweep_jobs(args: argparse.Namespace, base_lr: str | None) -> list[Job]:
    """Per domain and seed: the base before adaptation, then full fine-tuning, LoRA (per head,
    ``HEADS``, and rank) and LoRA from scratch at each of their learning rates, early-stopped on
    ``val/loss`` (``--patience``). All but LoRA from scratch adapt seed s's base at ``base_lr``,
    chosen on validation (``None``: not known yet, for ``--plan``). ``--adaptations`` keeps a
    subset, so that disjoint shards can run side by side (each its own ``--out``, one shared
    ``--work`` holding the bases).
    """
    tag = base_lr or "?"  # the base's lr in names and tags
    base = checkpoint_path(args.work, f"lrs-base-lr{tag}", SEED, "best")  # the run's seed's
    load = f"model.init_args.base_checkpoint={base}"
    chosen = set(args.adaptations)
    specs: list[tuple[str, int, str, list[float]]] = [("full", 0, "", args.lrs_full)]
    for adaptation, lrs in (("lora", args.lrs_lora), ("lora_scratch", args.lrs_scratch)):
        specs += [(adaptation, r, head, lrs) for head in args.heads for r in args.ranks]
    specs = [spec for spec in specs if spec[0] in chosen]
    jobs: list[Job] = []
    for domain in args.domains:
        common = (*_sweep_common(args), f"data.init_args.domain={domain}")
        if "before" in chosen:
            before = (*common, load, "model.init_args.adaptation=full", BASE_WEIGHTS)
            variant = Variant(f"lrs-{domain}-before-b{tag}", (MLP_CONFIG,), before, "test")
            info = _sweep_info(args, domain=domain, adaptation="before", lr="", base_lr=tag)
            jobs += [(variant, seed, info) for seed in args.seeds]
        for adaptation, r, head, lrs in specs:
            from_base = adaptation != "lora_scratch"
            for lr in lrs:
                name = f"lrs-{domain}-{adaptation}"
                name += (f"-r{r}-h{head}" if r else "") + f"-lr{_lr(lr)}"
                name += f"-b{tag}" if from_base else ""  # a new base: new runs
                options = [
                    *common,
                    f"model.init_args.adaptation={adaptation}",
                    f"model.init_args.lr={lr}",
                ]
                if r:
                    options += [f"model.init_args.lora_r={r}", *HEADS[head]]
                options += [load] if from_base else []
                info = _sweep_info(args, domain=domain, adaptation=adaptation, rank=r, head=head)
                info.update(lr=_lr(lr), base_lr=tag if from_base else "")
                variant = Variant(name, (MLP_CONFIG,), tuple(options))
                jobs += [(variant, seed, info) for seed in args.seeds]
    return jobs


def chosen_base_lr(args: argparse.Namespace) -> str | None:
    """The base learning rate with the best mean validation accuracy (None: no base run yet)."""
    lrs, seeds = {_lr(lr) for lr in args.lrs_base}, set(args.seeds)
    found = load_part(args.out, "lrsweep")
    return current_sweep([r for r in found if r.info["lr"] in lrs and r.seed in seeds])[0]


def check_protocol(args: argparse.Namespace) -> None:
    """ValueError when the lrsweep records hold runs of another data or epoch protocol."""
    ours = {k: str(getattr(args, k)) for k in PROTOCOL}
    for run in load_part(args.out, "lrsweep"):
        theirs = {k: str(run.info.get(k, "")) for k in PROTOCOL}
        if theirs != ours:
            raise ValueError(
                f"{part_dir(args.out, 'lrsweep')} holds runs with {theirs}, not {ours}: resuming "
                "would mix them; give another --out (and --work) or --fresh"
            )


def lrsweep_all_jobs(args: argparse.Namespace) -> list[Job]:
    """Every run of the part, the adaptations from the base chosen so far (for ``--plan``;
    ``--fresh`` discards the records, so no base is chosen yet)."""
    base_lr = None if args.fresh else chosen_base_lr(args)
    return [*lrsweep_base_jobs(args), *lrsweep_jobs(args, base_lr)]


def run_lrsweep(args: argparse.Namespace) -> None:
    """The bases first; then, from the base learning rate chosen on validation, the rest."""
    check_protocol(args)
    run_part(args, "lrsweep", lrsweep_base_jobs(args))
    base_lr = chosen_base_lr(args)
    if base_lr is None:
        raise RuntimeError(
            f"no base run of the lr sweep finished (see {part_dir(args.out, 'lrsweep')})"
        )
    log.info("base learning rate chosen on validation: %s", base_lr)
    run_part(args, "lrsweep", lrsweep_jobs(args, base_lr))
