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

Each "Δ vs control" is paired by seed (``studies.paired``): the mean over the seeds both ran of
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
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import logging
import shlex
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from attn_lightning.attention.optimization import OptimizationAttention
from attn_lightning.benchmarks import report, sites
from attn_lightning.studies.paired import PairedDelta, paired_delta
from attn_lightning.studies.runner import ROOT, Runner, Variant, build_cli
from attn_lightning.studies.tables import (
    RunResult,
    column,
    format_mean_std,
    mean_std,
    write_tables,
)

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
DELTA_VS_CONTROL = f"Δ {column(COMPARED).title} vs control [95 % CI]"

# Sensitivity (issue 13, part 4). The paper puts optimization attention's best site in the
# decoder cross-attention, so its grid centres there unless told otherwise.
SENSITIVITY_DEFAULT = "optimization_decoder_cross"
SITES = ("encoder_self", "decoder_self", "decoder_cross")  # DetectionTask's per-site specs
# The values each option takes in the grid (the issue's), in table order; the paper's point
# (λ 0.1, K 10, R 8: the optimization_* overlays) is in it.
GRID: dict[str, tuple[float | int, ...]] = {
    "lam": (0.03, 0.1, 0.3),
    "iterations": (5, 10, 20),
    "random_tokens": (0, 8),
}
GRID_TITLES = {"lam": "λ", "iterations": "K", "random_tokens": "random tokens"}
DELTA_VS_REFERENCE = f"Δ {column(COMPARED).title} vs default [95 % CI]"
KEYS90 = "keys90"  # AttentionDiagnostics' attention/<layer>/keys90, if a metrics file holds it


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


def per_seed(results: Sequence[RunResult], name: str, key: str = COMPARED) -> dict[int, float]:
    """``{seed: value of key}`` over the finished runs of variant ``name`` that report it."""
    return {
        r.seed: v
        for r in results
        if r.variant == name and r.status == "ok" and (v := r.value(key)) is not None
    }


def format_delta(delta: PairedDelta | None) -> str | None:
    """A paired Δ of ``COMPARED`` in its column's digits: ``+0.012 [-0.004, +0.028] (n=3)``."""
    shown = column(COMPARED)
    return None if delta is None else delta.format(scale=shown.scale, digits=shown.digits)


def comparisons(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per variant whose control also ran: ``{control, Δ test mAP vs control [95 % CI]}``.

    The Δ is paired by seed (``studies.paired``) over the finished runs of both; None (``–``)
    when they share no seed.
    """
    ran = {r.variant for r in results}
    out: dict[str, dict[str, Any]] = {}
    for name, control in CONTROLS.items():
        if name in ran and control in ran:
            delta = paired_delta(per_seed(results, name), per_seed(results, control))
            out[name] = {"control": f"`{control}`", DELTA_VS_CONTROL: format_delta(delta)}
    return out


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


@dataclass
class GridPoint:
    """One point of a sensitivity grid: its variant (a ``train.py fit`` run) and option values.

    Attributes:
        variant: the site variant's overlay plus an override per optimization site.
        options: ``GRID``'s options (``lam``, ``iterations``, ``random_tokens``) at this point.
    """

    variant: Variant
    options: dict[str, float | int]


def optimization_sites(name: str) -> dict[str, dict[str, Any]]:
    """The optimization attention specs of ``configs/detection/<name>.yaml``, per site.

    Read from the overlay itself (the sites it sets; the base sets none), so the grid keeps every
    other option of the spec (projections, dictionary, ...). Empty when there is no such file or
    it puts optimization attention at no site.
    """
    path = CONFIGS / f"{name}.yaml"
    if not path.is_file():
        return {}
    init_args = ((yaml.safe_load(path.read_text()) or {}).get("model") or {}).get("init_args")
    specs = {site: (init_args or {}).get(site) for site in SITES}
    return {
        site: dict(spec)
        for site, spec in specs.items()
        if isinstance(spec, dict) and spec.get("name") == "optimization"
    }


def sensitivity_sites() -> list[str]:
    """The variants a sensitivity grid can centre on: overlays with optimization at a site."""
    return sorted(p.stem for p in CONFIGS.glob("*.yaml") if optimization_sites(p.stem))


def _own_point(name: str, specs: Mapping[str, Mapping[str, Any]]) -> dict[str, float | int]:
    # An option a spec leaves out takes the backend's default: that is what the run would use.
    defaults = inspect.signature(OptimizationAttention.__init__).parameters
    point: dict[str, float | int] = {}
    for option in GRID:
        values = {site: spec.get(option, defaults[option].default) for site, spec in specs.items()}
        if len(set(values.values())) > 1:
            raise ValueError(
                f"variant {name!r} sets {option} differently per site ({values}); a sensitivity "
                "grid needs one value of it to vary around"
            )
        point[option] = next(iter(values.values()))
    return point


def grid_name(site_variant: str, own: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    """``<variant>@<option>=<value>,...`` over the options that differ from the variant's own
    point, in ``GRID`` order; the own point keeps the plain variant name."""
    changed = [f"{o}={options[o]}" for o in GRID if options[o] != own[o]]
    return f"{site_variant}@{','.join(changed)}" if changed else site_variant


def sensitivity_grid(
    site_variant: str = SENSITIVITY_DEFAULT, *, full: bool = False
) -> list[GridPoint]:
    """The sensitivity grid around ``site_variant``'s own point, that point first.

    One option of ``GRID`` changed at a time (every other value of it: 1 + 2 + 2 + 1 = 6 points
    around the paper's point), or with ``full`` every combination (3 × 3 × 2 = 18; one more when
    the own point is off the grid). Each point is ``configs/detection/<site_variant>.yaml`` plus,
    for every optimization site of it, ``model.init_args.<site>=<its spec with the point's
    options>`` (the whole spec: a dict argument given again replaces, it does not merge).

    Raises:
        ValueError: ``site_variant`` has no overlay with optimization attention at a site (the
            message lists those that do), or its sites disagree on an option of ``GRID``.
    """
    specs = optimization_sites(site_variant)
    if not specs:
        raise ValueError(
            f"no optimization attention site in a configs/detection overlay named "
            f"{site_variant!r}; allowed: {', '.join(sensitivity_sites())}"
        )
    own = _own_point(site_variant, specs)
    if full:
        points = [
            dict(zip(GRID, values, strict=True)) for values in itertools.product(*GRID.values())
        ]
    else:
        points = [
            {**own, option: value}
            for option, values in GRID.items()
            for value in values
            if value != own[option]
        ]
    grid = []
    for options in [own, *(p for p in points if p != own)]:
        overrides = tuple(
            f"model.init_args.{site}={json.dumps({**spec, **options})}"
            for site, spec in specs.items()
        )
        name = grid_name(site_variant, own, options)
        config = str(CONFIGS / f"{site_variant}.yaml")
        grid.append(GridPoint(Variant(name, configs=(config,), overrides=overrides), options))
    return grid


def _keys90(run: RunResult) -> float | None:
    # The mean over the layers that report it (only optimization layers have it).
    values = [
        v for k, v in run.metrics.items() if k.startswith("attention/") and k.endswith(f"/{KEYS90}")
    ]
    return statistics.fmean(values) if values else None


def sensitivity_cells(
    results: Sequence[RunResult], grid: Sequence[GridPoint]
) -> dict[str, dict[str, Any]]:
    """Per grid point: its λ, K, random tokens, the paired Δ test mAP vs the first point (the
    variant's own; ``reference`` there) and, if any run reports it, the mean keys90."""
    reference = grid[0].variant.name
    has_keys90 = any(_keys90(r) is not None for r in results)
    cells: dict[str, dict[str, Any]] = {}
    for point in grid:
        name = point.variant.name
        row: dict[str, Any] = {GRID_TITLES[o]: point.options[o] for o in GRID}
        if name == reference:
            row[DELTA_VS_REFERENCE] = "reference"
        else:
            delta = paired_delta(per_seed(results, name), per_seed(results, reference))
            row[DELTA_VS_REFERENCE] = format_delta(delta)
        if has_keys90:
            ok = [r for r in results if r.variant == name and r.status == "ok"]
            mean, std = mean_std([v for r in ok if (v := _keys90(r)) is not None])
            row[KEYS90] = None if mean is None else format_mean_std(mean, std, digits=2)
        cells[name] = row
    return cells


def _grid_table(
    results: Sequence[RunResult], grid: Sequence[GridPoint], cells: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    metrics = [column(k) for k in ("test/mAP", "test/AP50", "test/AP75")]
    titles = [*GRID_TITLES.values(), *(c.title for c in metrics), DELTA_VS_REFERENCE]
    titles += [KEYS90] if any(KEYS90 in row for row in cells.values()) else []
    lines = ["| " + " | ".join([*titles, "variant"]) + " |", "|" + "---|" * (len(titles) + 1)]
    for point in grid:
        name = point.variant.name
        values = {c.title: list(per_seed(results, name, c.key).values()) for c in metrics}
        row = dict(cells[name])
        for c in metrics:
            mean, std = mean_std(values[c.title])
            shown = format_mean_std(mean, std, scale=c.scale, digits=c.digits)
            row[c.title] = shown if mean is None else f"{shown} ({len(values[c.title])})"
        row = {t: ("–" if row.get(t) is None else str(row[t])) for t in titles}
        lines.append("| " + " | ".join([*row.values(), f"`{name}`"]) + " |")
    return lines


def write_sensitivity(
    out: Path,
    results: list[RunResult],
    grid: Sequence[GridPoint],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
) -> None:
    """The sensitivity tables: ``<out>.md`` opens with the grid (λ, K, random tokens, test mAP
    mean ± std (n), AP50, AP75, the paired Δ vs the variant's own point, keys90 where reported),
    then ``write``'s summary (with the same cells and the costs) and per-run tables; ``<out>.csv``
    is that summary, ``<out>_runs.csv`` one row per run."""
    cells = sensitivity_cells(results, grid)
    own = grid[0]
    point = ", ".join(f"{GRID_TITLES[o]} = {v}" for o, v in own.options.items())
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
        f"# Sensitivity of optimization attention: `{own.variant.name}` ({where})",
        "",
        *_grid_table(results, grid, cells),
        *(f"\n{note}" for note in notes),
        "",
        "## All columns and runs",
        "",
    ]
    md.write_text("\n".join(head) + "\n" + md.read_text())


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
    if args.sensitivity is not None and args.variants is not None:
        parser.error("--sensitivity makes its own variants; leave out --variants")
    if args.full_grid and args.sensitivity is None:
        parser.error("--full-grid needs --sensitivity")
    if args.variants is None and args.sensitivity is None and not args.sites:
        parser.error("--variants is required (names, or all for the whole study), or --sensitivity")
    grid: list[GridPoint] = []
    if args.sensitivity is not None:
        try:
            grid = sensitivity_grid(args.sensitivity, full=args.full_grid)
        except ValueError as error:
            parser.error(f"--sensitivity: {error}")
        chosen = [point.variant for point in grid]
    else:
        chosen = variants(args.variants or ["all"])
    experiment = args.experiment or ("detection_sensitivity" if grid else "detection_report")
    command = "python -m attn_lightning.studies.detection " + shlex.join(argv)

    def tables(done: list[RunResult], costs: dict[str, dict[str, Any]]) -> None:
        if grid:
            write_sensitivity(args.out, done, grid, costs, command=command, jobs=args.jobs)
        else:
            write(args.out, done, costs, command=command, jobs=args.jobs)

    if args.sites:
        write_sites(args.out, site_costs(chosen, overrides=args.set), command=command)
        log.info("wrote %s_sites.md and %s_sites.csv", args.out, args.out)
        return []
    runner = Runner(
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
    log.info("wrote %s.md, %s.csv and %s_runs.csv", args.out, args.out, args.out)
    return results


if __name__ == "__main__":
    main()
