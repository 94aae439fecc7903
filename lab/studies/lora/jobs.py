"""The jobs of the LoRA study's parts ``mlp``, ``variants`` and ``transformer`` (``runs.Job``:
a variant on ``configs/lora`` or ``configs/lora_reversal``, a seed and the run's tags); the
``lrsweep`` part's are in ``lrsweep``.
"""

from __future__ import annotations

import argparse
from typing import Any

from lab.studies.lora.lrsweep import HEADS
from lab.studies.lora.runs import (
    BASE_WEIGHTS,
    MLP_CONFIG,
    REV_CONFIG,
    REVERSAL_BASE,
    Job,
    checkpoint_path,
)
from lab.studies.runner import SEED, Variant


def _adaptation_jobs(
    prefix: str,
    config: str,
    full: tuple[str, ...],
    lora: tuple[str, ...],
    ranks: list[int],
    seed: int,
    info: dict[str, Any],
) -> list[Job]:
    """``<prefix>-before`` (the base tested with ``full``'s overrides), ``<prefix>-full``, then
    LoRA and LoRA from scratch at each rank (``<prefix>-<adaptation>-r<rank>``: ``lora``'s)."""
    before = Variant(f"{prefix}-before", (config,), (*full, BASE_WEIGHTS), subcommand="test")
    jobs: list[Job] = [
        (before, seed, {**info, "adaptation": "before"}),
        (Variant(f"{prefix}-full", (config,), full), seed, {**info, "adaptation": "full"}),
    ]
    for adaptation in ("lora", "lora_scratch"):
        for r in ranks:
            options = (f"model.init_args.adaptation={adaptation}", f"model.init_args.lora_r={r}")
            variant = Variant(f"{prefix}-{adaptation}-r{r}", (config,), (*lora, *options))
            jobs.append((variant, seed, {**info, "adaptation": adaptation, "rank": r}))
    return jobs


def _adapt(args: argparse.Namespace, domain: str) -> tuple[str, ...]:
    """The overrides of an MLP run that adapts its own seed's ``base-mlp`` to ``domain``."""
    return (
        f"model.init_args.lr={args.lr}",
        f"data.init_args.levels={args.levels}",
        f"data.init_args.angle={args.angle}",
        f"model.init_args.base_checkpoint={checkpoint_path(args.work, 'base-mlp', SEED)}",
        f"trainer.max_epochs={args.epochs}",
        "checkpoint.save_last=false",
        f"data.init_args.domain={domain}",
    )


def mlp_jobs(args: argparse.Namespace) -> list[Job]:
    """Per seed: the base MLP, then per domain before / full / LoRA / LoRA-from-scratch."""
    jobs: list[Job] = []
    base = (f"model.init_args.lr={args.lr}", f"trainer.max_epochs={args.base_epochs}")
    for seed in args.seeds:
        keep = str(checkpoint_path(args.work, "base-mlp", seed))
        info = {"part": "mlp", "domain": "original", "adaptation": "base", "rank": 0}
        jobs.append((Variant("base-mlp", (MLP_CONFIG,), base), seed, {**info, "_keep": keep}))
        for domain in args.domains:
            adapt = _adapt(args, domain)
            full = (*adapt, "model.init_args.adaptation=full")
            info = {"part": "mlp", "domain": domain, "rank": 0}
            jobs += _adaptation_jobs(domain, MLP_CONFIG, full, adapt, args.ranks, seed, info)
    return jobs


VARIANTS = {  # head and bias options of peft's LoraConfig, compared at one rank
    "lora_head_frozen": HEADS["frozen"],
    "lora_head_saved": HEADS["trained"],
    "lora_bias_all": ("model.init_args.lora_bias=all",),
}


def variant_jobs(args: argparse.Namespace) -> list[Job]:
    """LoRA at ``--variant-rank`` with the head frozen / trained whole, or biases trained.

    Needs the base checkpoints of the ``mlp`` part (same ``--work``, same seeds).
    """
    r = args.variant_rank
    lora = ("model.init_args.adaptation=lora", f"model.init_args.lora_r={r}")
    planned = [
        (
            Variant(f"{d}-{a}-r{r}", (MLP_CONFIG,), (*_adapt(args, d), *lora, *options)),
            {"part": "variants", "domain": d, "adaptation": a, "rank": r},
        )
        for d in args.variant_domains
        for a, options in VARIANTS.items()
    ]
    return [(variant, seed, info) for seed in args.seeds for variant, info in planned]


def transformer_jobs(args: argparse.Namespace) -> list[Job]:
    """One reversal base (seed 0), then per seed before / full / LoRA / LoRA from scratch."""
    sizes = (
        f"data.init_args.seq_len={args.seq_len}",
        "model.init_args.net.max_len=32",
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
    ckpt = checkpoint_path(args.work, base.name, 0)
    info = {"part": "transformer", "domain": "reversal", "adaptation": "base", "rank": 0}
    jobs: list[Job] = [(base, 0, {**info, "_keep": str(ckpt)})]
    common = (
        *sizes,
        f"model.init_args.base_checkpoint={ckpt}",
        "checkpoint.save_last=false",
        f"trainer.max_steps={args.reversal_adapt_steps}",
    )
    for seed in args.seeds:
        info = {"part": "transformer", "domain": "reversal+1", "rank": 0}
        full = (*common, "model.init_args.adaptation=full", f"model.init_args.lr={args.lr_full}")
        lora = (*common, f"model.init_args.lr={args.lr_lora}")
        jobs += _adaptation_jobs("rev", REV_CONFIG, full, lora, args.transformer_ranks, seed, info)
    return jobs
