"""The DETR attention-site comparison: config-overlay variants over seeds, plus model costs.

    python -m attn_lightning.studies.detection --variants softmax softmax_no_projections \\
        optimization_encoder_self optimization_decoder_self optimization_decoder_cross \\
        optimization_all mean --seeds 0 1 2 --jobs 2 --out docs/results/detection_runs

A variant is ``configs/detection/<variant>.yaml`` stacked on ``configs/detection/base.yaml``;
each (variant, seed) is a ``train.py fit`` run of ``attn_lightning.studies.runner`` (``--jobs``
at once). Then every variant's model is built from its config stack by ``train.py``'s own parser
(untrained weights: cost does not depend on them) and measured in this process, one thread,
batch ``--batch``, at the config's input size: attention parameters (projections and backend
tensors) and all parameters, median forward latency per image, and peak forward memory
(``benchmarks.measure.peak_bytes``). ``--skip-runs`` rebuilds the tables from the metrics files
of an earlier run.

Writes ``<out>.md`` (summary with the cost columns + per-run table + the command),
``<out>.csv`` (summary) and ``<out>_runs.csv`` (one row per run).
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attn_lightning.studies.runner import ROOT, Runner, Variant, build_cli
from attn_lightning.studies.tables import RunResult, write_tables

log = logging.getLogger("attn_lightning.studies.detection")
CONFIGS = ROOT / "configs" / "detection"
METRICS = ("test/mAP", "test/AP50", "test/AP75", "val/mAP")


def variants(names: Sequence[str]) -> list[Variant]:
    """The variants ``configs/detection/<name>.yaml``; SystemExit naming any missing file."""
    missing = [n for n in names if not (CONFIGS / f"{n}.yaml").is_file()]
    if missing:
        raise SystemExit(f"no config for {missing} under {CONFIGS}")
    return [Variant.from_config(CONFIGS / f"{n}.yaml") for n in names]


def measure(
    variant: Variant, *, overrides: Sequence[str], batch: int, repeats: int
) -> dict[str, Any]:
    """Parameter counts, forward latency per image and peak forward memory of a variant.

    Returns:
        ``{attention params, total params, forward ms / image, peak forward MiB, input}``.
    """
    from attn_lightning.benchmarks.measure import median_seconds, peak_bytes
    from attn_lightning.models.detr import attention_parameters

    # train.py's parser and constructors (seeded by the config's seed_everything), no training.
    cli = build_cli([CONFIGS / "base.yaml", *variant.configs], [*variant.overrides, *overrides])
    model = cli.model.net.eval()
    size = cli.datamodule.image_size
    images = torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    cpu = torch.device("cpu")

    def forward() -> None:
        with torch.no_grad():
            model(images)

    seconds = median_seconds(forward, repeats=repeats, warmup=2, device=cpu)
    peak = peak_bytes(forward, device=cpu)
    return {
        "attention params": attention_parameters(model),
        "total params": sum(p.numel() for p in model.parameters()),
        "forward ms / image": round(1e3 * seconds / batch, 3),
        "peak forward MiB": None if peak is None else round(peak / 2**20, 1),
        "input": f"{batch}×3×{size}×{size}",
    }


def write(
    out: Path,
    results: list[RunResult],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
) -> None:
    """The study's tables: ``METRICS`` mean ± std per variant, then its cost columns."""
    inputs = sorted({str(cost["input"]) for cost in costs.values()})
    notes = [f"Cost columns: one CPU thread, input {', '.join(inputs)}, eval mode, no grad."]
    write_tables(
        out,
        results,
        command=command,
        metrics=METRICS,
        label="variant",
        jobs=jobs,
        extra={v: {k: x for k, x in cost.items() if k != "input"} for v, cost in costs.items()},
        notes=notes if costs else [],
    )


def build_parser() -> argparse.ArgumentParser:
    """The detection study's CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.studies.detection",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--variants", nargs="+", required=True, help="configs/detection/<name>.yaml names")
    add("--seeds", nargs="+", type=int, default=[0, 1, 2])
    add(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="train.py argument (repeatable)",
    )
    add("--jobs", type=int, default=1, help="training runs at once")
    add("--batch", type=int, default=8, help="batch of the cost measurement")
    add("--repeats", type=int, default=20, help="timed forward calls")
    add("--experiment", default="detection_report")
    add("--skip-runs", "--skip_runs", action="store_true", help="reuse existing metrics files")
    add("--no-costs", "--no_costs", action="store_true", help="skip the cost measurement")
    add("--out", required=True, type=Path, help="output path without extension")
    return parser


def main(argv: list[str] | None = None) -> list[RunResult]:
    """Run the detection study; returns the runs in table order."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("lightning", "lightning.pytorch", "lightning.fabric"):  # the cost models' build
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    chosen = variants(args.variants)
    runner = Runner(
        configs=(str(CONFIGS / "base.yaml"),),
        overrides=tuple(args.set),
        experiment=args.experiment,
        runs_dir=Path("sweeps") / args.experiment,
        skip_runs=args.skip_runs,
    )
    command = "python -m attn_lightning.studies.detection " + shlex.join(argv)
    results = runner.run_all(
        [(v, s) for v in chosen for s in args.seeds],
        parallel=args.jobs,
        # Tables without the cost columns part-way through, so a long study can be inspected.
        on_result=lambda _, done: write(args.out, done, {}, command=command, jobs=args.jobs),
    )
    costs: dict[str, dict[str, Any]] = {}
    if not args.no_costs:
        torch.set_num_threads(1)
        for v in chosen:
            costs[v.name] = measure(v, overrides=args.set, batch=args.batch, repeats=args.repeats)
    write(args.out, results, costs, command=command, jobs=args.jobs)
    log.info("wrote %s.md, %s.csv and %s_runs.csv", args.out, args.out, args.out)
    return results


if __name__ == "__main__":
    main()
