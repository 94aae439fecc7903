"""The DETR attention-site comparison: config-overlay variants over seeds, plus model costs.

    python -m attn_lightning.studies.detection --variants all --seeds 0 1 2 --jobs 2 \\
        --out docs/results/detection_runs

``all`` is ``STUDY_VARIANTS``: softmax, softmax_no_projections, mean, and for each site
(encoder self, decoder self, decoder cross, all three) the optimization variant next to its
softmax ``no_qk`` control (same projections, softmax mixing), plus pool_encoder_self. Each
variant with a control (``CONTROLS``) gets the columns "control" and "Δ test mAP vs control".

A variant is ``configs/detection/<variant>.yaml`` stacked on ``configs/detection/base.yaml``;
each (variant, seed) is a ``train.py fit`` run of ``attn_lightning.studies.runner`` (``--jobs``
at once). Then every variant's model is built from its config stack by ``train.py``'s own parser
(untrained weights: cost does not depend on them) and measured in this process, one thread,
batch ``--batch``, at the config's input size: attention parameters (projections and backend
tensors) and all parameters, median forward latency per image, and peak forward memory
(``benchmarks.measure.peak_bytes``). ``--skip-runs`` rebuilds the tables from the metrics files
of an earlier run.

Writes ``<out>.md`` (summary with the cost columns + per-run table + the command),
``<out>.csv`` (summary) and ``<out>_runs.csv`` (one row per run); with the cost measurement
also ``<out>_sites.{md,csv}``, each site's backend, projections, attention parameters and
counted forward FLOPs (``benchmarks.sites``). ``--sites`` writes only that table: no training,
no timing (``--variants`` defaults to ``all`` there)::

    python -m attn_lightning.studies.detection --sites --out docs/results/detection_sites
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
from torch import nn

from attn_lightning.benchmarks import report, sites
from attn_lightning.studies.runner import ROOT, Runner, Variant, build_cli
from attn_lightning.studies.tables import RunResult, column, mean_std, write_tables

log = logging.getLogger("attn_lightning.studies.detection")
CONFIGS = ROOT / "configs" / "detection"
METRICS = ("test/mAP", "test/AP50", "test/AP75", "val/mAP")
# The study, in table order: each optimization row right after the control it is compared with.
STUDY_VARIANTS = (
    "softmax",
    "softmax_no_projections",
    "mean",
    "softmax_no_qk_encoder_self",
    "optimization_encoder_self",
    "pool_encoder_self",
    "softmax_no_qk_decoder_self",
    "optimization_decoder_self",
    "softmax_no_qk_decoder_cross",
    "optimization_decoder_cross",
    "softmax_no_qk_all",
    "optimization_all",
)
# Variant -> the variant it differs from in one thing only (the comment of each config says so):
# optimization and pool -> softmax with the same projections at the same site(s) (the mixing);
# the no_qk controls -> softmax (the missing Q/K matrices); mean (projections: false at the
# encoder) -> softmax without projections.
CONTROLS = {
    "optimization_encoder_self": "softmax_no_qk_encoder_self",
    "optimization_decoder_self": "softmax_no_qk_decoder_self",
    "optimization_decoder_cross": "softmax_no_qk_decoder_cross",
    "optimization_all": "softmax_no_qk_all",
    "pool_encoder_self": "softmax_no_qk_encoder_self",
    "softmax_no_qk_encoder_self": "softmax",
    "softmax_no_qk_decoder_self": "softmax",
    "softmax_no_qk_decoder_cross": "softmax",
    "softmax_no_qk_all": "softmax",
    "softmax_no_projections": "softmax",
    "mean": "softmax_no_projections",
}
COMPARED = "test/mAP"  # the metric of the "Δ vs control" column


def variants(names: Sequence[str]) -> list[Variant]:
    """The variants ``configs/detection/<name>.yaml`` (``all``: ``STUDY_VARIANTS``), each once,
    in the order given; SystemExit naming any missing file."""
    names = [n for name in names for n in (STUDY_VARIANTS if name == "all" else (name,))]
    missing = [n for n in names if not (CONFIGS / f"{n}.yaml").is_file()]
    if missing:
        raise SystemExit(f"no config for {missing} under {CONFIGS}")
    return [Variant.from_config(CONFIGS / f"{n}.yaml") for n in dict.fromkeys(names)]


def build_model(variant: Variant, *, overrides: Sequence[str] = ()) -> tuple[nn.Module, int]:
    """A variant's DETR (eval mode, untrained) and its input image size, built by ``train.py``'s
    parser and constructors (seeded by the config's ``seed_everything``), without training."""
    cli = build_cli([CONFIGS / "base.yaml", *variant.configs], [*variant.overrides, *overrides])
    return cli.model.net.eval(), int(cli.datamodule.image_size)


def measure(
    variant: Variant, *, overrides: Sequence[str], batch: int, repeats: int
) -> dict[str, Any]:
    """Parameter counts, forward latency per image and peak forward memory of a variant.

    Returns:
        ``{attention params, total params, forward ms / image, peak forward MiB, input}``.
    """
    from attn_lightning.benchmarks.measure import median_seconds, peak_bytes
    from attn_lightning.models.detr import attention_parameters

    model, size = build_model(variant, overrides=overrides)
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


def site_costs(chosen: Sequence[Variant], *, overrides: Sequence[str] = ()) -> list[sites.SiteRow]:
    """Every variant's per-site rows (``benchmarks.sites``): one eval forward each, no timing."""
    rows: list[sites.SiteRow] = []
    for variant in chosen:
        model, size = build_model(variant, overrides=overrides)
        rows += sites.site_rows(variant.name, model, size)
    return rows


def write_sites(out: Path, rows: list[sites.SiteRow], *, command: str) -> None:
    """``<out>_sites.md`` (per site, then per variant) and ``<out>_sites.csv`` (per site)."""
    meta = report.environment(
        torch.device("cpu"),
        flops="forward, one image, eval mode (no random tokens); counted as in "
        "attn_lightning.benchmarks.flops (matmuls 2·m·n·k + factorisations)",
        tokens="L, S recorded from one forward of a blank image of the config's size",
    )
    meta["command"] = command
    report.write_csv(out.with_name(out.name + "_sites.csv"), rows, meta)
    text = (
        f"# Attention sites: parameters and FLOPs\n\n{report.markdown_meta(meta)}\n\n"
        f"## Per site\n\n{sites.site_table(rows)}\n\n"
        f"## Per variant (all sites and layers, one image)\n\n{sites.variant_table(rows)}\n\n"
        "Attention params: the Q/K/V/out projections and any trainable backend tensors of the "
        "site's layers. FLOPs / attention call: the backend's forward on one image, all heads. "
        "Projection FLOPs: 2·n·E² per projection the site has (Q and out over the L queries, "
        "K and V over the S keys). Eval mode: in training, optimization's R random tokens "
        "join its dictionary (S' = S + R columns), which the other backends do not have.\n"
    )
    out.with_name(out.name + "_sites.md").write_text(text)


def comparisons(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per variant whose control also ran: ``{control, Δ test mAP vs control}`` (means of the
    runs that finished; ``–`` when either has none)."""
    means = {}
    for name in dict.fromkeys(r.variant for r in results):
        ok = [r for r in results if r.variant == name and r.status == "ok"]
        means[name] = mean_std([x for r in ok if (x := r.value(COMPARED)) is not None])[0]
    out: dict[str, dict[str, Any]] = {}
    for name, control in CONTROLS.items():
        if name in means and control in means:
            mine, theirs = means[name], means[control]
            delta = None if mine is None or theirs is None else f"{mine - theirs:+.3f}"
            out[name] = {"control": f"`{control}`", f"Δ {column(COMPARED).title} vs control": delta}
    return out


def write(
    out: Path,
    results: list[RunResult],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
) -> None:
    """The study's tables: ``METRICS`` mean ± std per variant, its cost columns, and the
    comparison with its control where both ran (``CONTROLS``)."""
    notes = []
    if costs:
        inputs = sorted({str(cost["input"]) for cost in costs.values()})
        notes.append(
            f"Cost columns: one CPU thread, input {', '.join(inputs)}, eval mode, no grad."
        )
    extra = {v: {k: x for k, x in cost.items() if k != "input"} for v, cost in costs.items()}
    compared = comparisons(results)
    for variant, cells in compared.items():
        extra.setdefault(variant, {}).update(cells)
    # Every variant gets every column ("–" where it has none): the CSV needs one header.
    titles = list(dict.fromkeys(t for cells in extra.values() for t in cells))
    for variant in dict.fromkeys(r.variant for r in results):
        cells = extra.setdefault(variant, {})
        extra[variant] = {t: cells.get(t) for t in titles}
    if compared:
        notes.append(
            f"Δ vs control: the variant's mean {column(COMPARED).title} minus its control's; "
            "the control differs in one thing only (optimization and pool: the mixing, softmax "
            "with the same projections at the same sites; softmax no_qk: the Q/K matrices)."
        )
    write_tables(
        out,
        results,
        command=command,
        metrics=METRICS,
        label="variant",
        jobs=jobs,
        extra=extra,
        notes=notes,
    )


def build_parser() -> argparse.ArgumentParser:
    """The detection study's CLI (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.studies.detection",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add(
        "--variants",
        nargs="+",
        help="configs/detection/<name>.yaml names, or all (the study; the default of --sites)",
    )
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
    add(
        "--sites",
        action="store_true",
        help="only write <out>_sites.{md,csv}: per-site parameters and FLOPs (no training)",
    )
    add("--out", required=True, type=Path, help="output path without extension")
    return parser


def main(argv: list[str] | None = None) -> list[RunResult]:
    """Run the detection study; returns the runs in table order."""
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("lightning", "lightning.pytorch", "lightning.fabric"):  # the cost models' build
        logging.getLogger(noisy).setLevel(logging.WARNING)
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.variants is None and not args.sites:
        parser.error("--variants is required (names, or all for the whole study)")
    chosen = variants(args.variants or ["all"])
    command = "python -m attn_lightning.studies.detection " + shlex.join(argv)
    if args.sites:
        write_sites(args.out, site_costs(chosen, overrides=args.set), command=command)
        log.info("wrote %s_sites.md and %s_sites.csv", args.out, args.out)
        return []
    runner = Runner(
        configs=(str(CONFIGS / "base.yaml"),),
        overrides=tuple(args.set),
        experiment=args.experiment,
        runs_dir=Path("sweeps") / args.experiment,
        skip_runs=args.skip_runs,
    )
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
        write_sites(args.out, site_costs(chosen, overrides=args.set), command=command)
    write(args.out, results, costs, command=command, jobs=args.jobs)
    log.info("wrote %s.md, %s.csv and %s_runs.csv", args.out, args.out, args.out)
    return results


if __name__ == "__main__":
    main()
