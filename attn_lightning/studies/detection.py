"""The DETR attention-site comparison: config-overlay variants over seeds, plus model costs.

    python -m attn_lightning.studies.detection --variants all --seeds 0 1 2 --jobs 2 \\
        --out docs/results/detection_runs

``all`` is ``STUDY_VARIANTS``: softmax, softmax_no_projections, mean with its control
(softmax without projections at the encoder only), and for each site
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
``<out>.csv`` (summary), ``<out>_runs.csv`` (one row per run) and ``<out>_curves.csv`` (val mAP
at every validation of every run, ``results.curves``); with the cost measurement
also ``<out>_sites.{md,csv}``, each site's backend, projections, attention parameters and
counted forward FLOPs (``benchmarks.sites``). ``--sites`` writes only that table: no training,
no timing (``--variants`` defaults to ``all`` there)::

    python -m attn_lightning.studies.detection --sites --out docs/results/detection_sites

Each "Δ vs control" is paired by seed (``results.paired``): the mean over the seeds both ran of
``variant − control``, with its 95 % Student-t interval.

``--sensitivity [VARIANT]`` (issue 13, part 4) replaces ``--variants`` by a grid around an
optimization variant's own point (default ``optimization_decoder_cross``, the paper's best site;
any overlay with optimization attention at a site is allowed): λ (``lam``) ∈ {0.03, 0.1, 0.3},
K (``iterations``) ∈ {5, 10, 20}, random tokens ∈ {0, 8}, one option changed at a time (6
points with the default) or, with ``--full-grid``, the full 3×3×2 factorial (18). A point is the
overlay plus an override that replaces the spec of every optimization site
(``model.init_args.decoder_cross={...}``), named ``<variant>@<option>=<value>,...`` after the
options that differ from the variant's own point (which keeps the plain name), so a one-at-a-time
run and the same full-grid point share a name and a metrics file (``--resume`` reuses it). The
runs' experiment defaults to ``detection_sensitivity``, so the variant's own point never replaces
the study's run of the same name::

    python -m attn_lightning.studies.detection --sensitivity --seeds 0 1 2 \\
        --set trainer.max_steps=2000 --set trainer.val_check_interval=500 \\
        --out docs/results/detection_sensitivity

Its tables add λ, K, random tokens, the paired Δ test mAP vs the variant's own point and, where
the runs' metrics files hold ``attention/<layer>/keys90``, the mean keys90 over the layers.

``--ablation [VARIANT]`` is the same machinery with ``ABLATIONS`` in place of the grid: the
paper's form at the variant's site(s) with one ingredient swapped at a time (dictionary keys,
power 1, signed weights, normalised atoms, no random tokens, λ = 0), plus the variant's control
(``CONTROLS``) at the same budget, experiment ``detection_ablation``. It asks which ingredient
decides whether a site learns::

    python -m attn_lightning.studies.detection --ablation --seeds 0 1 \
        --set trainer.max_steps=2000 --set trainer.val_check_interval=500 \
        --out docs/results/detection_ablation

The variants and their controls are in ``studies.detection_variants``, the grid and its cells in
``studies.detection_sensitivity``; this module measures the costs, writes the tables and is the
CLI.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attn_lightning.benchmarks import report, sites
from attn_lightning.results.curves import append_curves, read_curve_rows
from attn_lightning.results.records import RunResult, read_runs_csv
from attn_lightning.results.tables import column, write_tables
from attn_lightning.studies.detection_sensitivity import (
    ABLATIONS,
    GRID,
    KEYS90,
    SENSITIVITY_DEFAULT,
    GridPoint,
    grid_table,
    optimization_sites,
    sensitivity_cells,
    sensitivity_grid,
    title,
)
from attn_lightning.studies.detection_variants import (
    COMPARED,
    CONFIGS,
    CONTROLS,
    comparisons,
    variants,
)
from attn_lightning.studies.runner import Runner, Variant, build_cli

log = logging.getLogger("attn_lightning.studies.detection")
METRICS = ("test/mAP", "test/AP50", "test/AP75", "val/mAP")
CURVE = "val/mAP"  # <out>_curves.csv: every validation of every run


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


def write(
    out: Path,
    results: list[RunResult],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
    cells: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """The study's tables: ``METRICS`` mean ± std per variant, its cost columns, the
    comparison with its control where both ran (``CONTROLS``) and any other per-variant
    ``cells`` (title -> value; the sensitivity grid's)."""
    notes = []
    if costs:
        inputs = sorted({str(cost["input"]) for cost in costs.values()})
        notes.append(
            f"Cost columns: one CPU thread, input {', '.join(inputs)}, eval mode, no grad."
        )
    extra = {v: {k: x for k, x in cost.items() if k != "input"} for v, cost in costs.items()}
    compared = comparisons(results)
    for more in (compared, cells or {}):
        for variant, row in more.items():
            extra.setdefault(variant, {}).update(row)
    # Every variant gets every column ("–" where it has none): the CSV needs one header.
    titles = list(dict.fromkeys(t for row in extra.values() for t in row))
    for variant in dict.fromkeys(r.variant for r in results):
        row = extra.setdefault(variant, {})
        extra[variant] = {t: row.get(t) for t in titles}
    if compared:
        notes.append(
            f"Δ vs control: the variant's {column(COMPARED).title} minus its control's, paired "
            "by seed: mean [95 % Student-t interval] (n seeds both finished; one seed: no "
            "interval). The control differs in one thing only (optimization and pool: the "
            "mixing, softmax with the same projections at the same sites; softmax no_qk: the "
            "Q/K matrices)."
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


def write_sensitivity(
    out: Path,
    results: list[RunResult],
    grid: Sequence[GridPoint],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
    heading: str = "Sensitivity of optimization attention",
) -> None:
    """The sensitivity tables: ``<out>.md`` opens with the grid (its options, test mAP
    mean ± std (n), AP50, AP75, the paired Δ vs the variant's own point, keys90 where reported),
    then ``write``'s summary (with the same cells and the costs) and per-run tables; ``<out>.csv``
    is that summary, ``<out>_runs.csv`` one row per run."""
    cells = sensitivity_cells(results, grid)
    own = grid[0]
    point = ", ".join(f"{title(o)} = {v}" for o, v in own.options.items())
    notes = [
        f"Δ vs default: per seed, the point's {column(COMPARED).title} minus that of "
        f"`{own.variant.name}` ({point}) with the same seed; mean [95 % Student-t interval] "
        "(n seeds both finished; one seed: no interval)."
    ]
    if not any(KEYS90 in row for row in cells.values()):
        notes.append(
            f"No {KEYS90} column: the runs' metrics files hold no attention/<layer>/{KEYS90} "
            "(AttentionDiagnostics logs it to TensorBoard only, under logs/<experiment>/<run>/)."
        )
    write(out, results, costs, command=command, jobs=jobs, cells=cells)
    md = out.with_name(out.name + ".md")
    where = ", ".join(f"`{site}`" for site in optimization_sites(own.variant.name))
    head = [
        f"# {heading}: `{own.variant.name}` ({where})",
        "",
        *grid_table(results, grid, cells),
        *(f"\n{note}" for note in notes),
        "",
        "## All columns and runs",
        "",
    ]
    md.write_text("\n".join(head) + "\n" + md.read_text())


def read_earlier(
    prefixes: Sequence[Path],
) -> tuple[dict[tuple[str, int], RunResult], list[dict[str, Any]]]:
    """Runs of earlier sessions from committed tables (``--earlier``): by (variant, seed), the
    run of the first ``<prefix>_runs.csv`` that holds it, and its rows of that prefix's
    ``<prefix>_curves.csv``."""
    earlier: dict[tuple[str, int], RunResult] = {}
    curves: list[dict[str, Any]] = []
    for prefix in prefixes:
        runs = read_runs_csv(prefix.with_name(prefix.name + "_runs.csv"))
        new = {(r.variant, r.seed): r for r in runs if (r.variant, r.seed) not in earlier}
        earlier.update(new)
        rows = read_curve_rows(prefix.with_name(prefix.name + "_curves.csv"))
        curves += [c for c in rows if (c["variant"], c["seed"]) in new]
    return earlier, curves


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
    add(
        "--sensitivity",
        nargs="?",
        const=SENSITIVITY_DEFAULT,
        metavar="VARIANT",
        help="instead of --variants: the λ/K/random-tokens grid around this optimization "
        f"variant (default {SENSITIVITY_DEFAULT}), one option changed at a time",
    )
    add(
        "--ablation",
        nargs="?",
        const=SENSITIVITY_DEFAULT,
        metavar="VARIANT",
        help="instead of --variants: the paper's form at this variant's site(s) with one "
        "ingredient swapped at a time (dictionary, power, sign, normalize, random tokens, "
        f"λ = 0), plus the variant's control (default {SENSITIVITY_DEFAULT})",
    )
    add(
        "--full-grid",
        "--full_grid",
        action="store_true",
        help="with --sensitivity: every combination (3×3×2), not one option at a time",
    )
    add(
        "--experiment",
        default=None,
        help="train.py --experiment of the runs (default detection_report; "
        "detection_sensitivity with --sensitivity, so its runs never replace the study's)",
    )
    add("--skip-runs", "--skip_runs", action="store_true", help="reuse existing metrics files")
    add(
        "--resume",
        action="store_true",
        help="reuse a run's metrics file where it exists, train the others",
    )
    add(
        "--earlier",
        nargs="+",
        type=Path,
        default=[],
        metavar="PREFIX",
        help="committed tables of earlier runs (<PREFIX>_runs.csv, <PREFIX>_curves.csv): a "
        "(variant, seed) with no metrics file of its own is read from the first that has it "
        "instead of trained",
    )
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
    grid_flag = "--sensitivity" if args.sensitivity is not None else "--ablation"
    centre = args.sensitivity if args.sensitivity is not None else args.ablation
    if args.sensitivity is not None and args.ablation is not None:
        parser.error("give --sensitivity or --ablation, not both")
    if centre is not None and args.variants is not None:
        parser.error(f"{grid_flag} makes its own variants; leave out --variants")
    if args.full_grid and args.sensitivity is None:
        parser.error("--full-grid needs --sensitivity")
    if args.variants is None and centre is None and not args.sites:
        parser.error(
            "--variants is required (names, or all for the whole study), or --sensitivity "
            "or --ablation"
        )
    grid: list[GridPoint] = []
    chosen: list[Variant] = []
    if centre is not None:
        options = GRID if args.sensitivity is not None else ABLATIONS
        try:
            grid = sensitivity_grid(centre, full=args.full_grid, grid=options)
        except ValueError as error:
            parser.error(f"{grid_flag}: {error}")
        chosen = [point.variant for point in grid]
        if args.ablation is not None and centre in CONTROLS:
            # The ladder's floor and ceiling: its control at the same budget, in the same table.
            chosen += variants([CONTROLS[centre]])
    else:
        chosen = variants(args.variants or ["all"])
    kind = "detection_sensitivity" if args.sensitivity is not None else "detection_ablation"
    experiment = args.experiment or (kind if grid else "detection_report")
    command = "python -m attn_lightning.studies.detection " + shlex.join(argv)

    def tables(done: list[RunResult], costs: dict[str, dict[str, Any]]) -> None:
        if grid:
            heading = (
                "Sensitivity of optimization attention"
                if args.sensitivity is not None
                else "Ablation of optimization attention: one ingredient of the paper's form "
                "swapped at a time"
            )
            write_sensitivity(
                args.out, done, grid, costs, command=command, jobs=args.jobs, heading=heading
            )
        else:
            write(args.out, done, costs, command=command, jobs=args.jobs)

    if args.sites:
        write_sites(args.out, site_costs(chosen, overrides=args.set), command=command)
        log.info("wrote %s_sites.md and %s_sites.csv", args.out, args.out)
        return []
    earlier, earlier_curves = read_earlier(args.earlier)
    runner = Runner(
        earlier=earlier,
        configs=(str(CONFIGS / "base.yaml"),),
        overrides=tuple(args.set),
        experiment=experiment,
        runs_dir=Path("sweeps") / experiment,
        resume=args.resume,
        skip_runs=args.skip_runs,
    )
    results = runner.run_all(
        [(v, s) for v in chosen for s in args.seeds],
        parallel=args.jobs,
        # Tables without the cost columns part-way through, so a long study can be inspected.
        on_result=lambda _, done: tables(done, {}),
    )
    costs: dict[str, dict[str, Any]] = {}
    if not args.no_costs:
        torch.set_num_threads(1)
        for v in chosen:
            costs[v.name] = measure(v, overrides=args.set, batch=args.batch, repeats=args.repeats)
        write_sites(args.out, site_costs(chosen, overrides=args.set), command=command)
    tables(results, costs)
    # Once, at the end: it reads every run's log folder.
    append_curves(args.out, results, CURVE, earlier_curves)
    log.info("wrote %s.md, %s.csv and %s_runs.csv", args.out, args.out, args.out)
    return results


if __name__ == "__main__":
    main()
