"""``approx``: the command, tables and figure panels of the approximation experiments.

The errors themselves are measured by ``approximation`` (relative error of the approximate
backends against exact softmax or exact polynomial attention, float64); this module holds the
command's arguments and run, one table per experiment and one figure per experiment.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch

from lab.benchmarks import approximation as approx
from lab.benchmarks import plots, report
from lab.benchmarks.approximation import ApproxRow
from lab.benchmarks.arguments import add_output
from lab.benchmarks.report import markdown_table


def _curve(label: str, points: Sequence[ApproxRow]) -> dict:
    return {
        "label": label,
        "x": [r.x for r in points],
        "y": [r.mean for r in points],
        "lo": [r.min for r in points],
        "hi": [r.max for r in points],
    }


def _by(rows: Sequence[ApproxRow], key) -> dict[str, list[ApproxRow]]:
    out: dict[str, list[ApproxRow]] = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return out


def _label(r: ApproxRow) -> str:
    both = r.experiment == "sketch"  # the one experiment with two references
    return f"{r.series} vs {r.reference}" if both or r.reference != "softmax" else r.series


def figure_panels(rows: Sequence[ApproxRow], experiment: str) -> list[dict]:
    """The panels of one experiment's figure, in ``plots.band_figure``'s format."""
    rows = [r for r in rows if r.experiment == experiment]
    base = {"ylabel": "relative error ‖out − ref‖ / ‖ref‖", "ylog": True}
    if experiment != "performer":
        xlabel = {
            "scale": "input std σ of q and k",
            "sketch": "sketch size r",
            "degree": "polynomial degree p",
        }[experiment]
        curves = [_curve(label, pts) for label, pts in _by(rows, _label).items()]
        return [
            {
                **base,
                "title": f"{experiment}: error against exact attention",
                "xlabel": xlabel,
                "xlog": experiment == "sketch",
                "curves": curves,
            }
        ]
    panels = []
    by_kernel = _by(rows, lambda r: r.series.split("/")[0])
    for kernel, mine in by_kernel.items():
        curves = [
            _curve(s.split("/", 1)[1], pts) for s, pts in _by(mine, lambda r: r.series).items()
        ]
        panels.append(
            {
                **base,
                "title": f"Performer, {kernel} features vs softmax",
                "xlabel": "num_features m",
                "xlog": True,
                "curves": curves,
            }
        )
    orth = [r for r in rows if "/orthogonal" in r.series]
    curves = [_curve(s, pts) for s, pts in _by(orth, lambda r: r.series).items()]
    panels.append(
        {
            **base,
            "title": "orthogonal projections: kernels compared",
            "xlabel": "num_features m",
            "xlog": True,
            "curves": curves,
        }
    )
    return panels


def markdown_tables(rows: Sequence[ApproxRow]) -> str:
    """One table per experiment: rows = (series, reference), columns = x, cells mean ± std."""
    parts = []
    for experiment, mine in _by(rows, lambda r: r.experiment).items():
        xs = sorted({r.x for r in mine})
        index = {(r.series, r.reference, r.x): r for r in mine}
        body = []
        for series, reference in dict.fromkeys((r.series, r.reference) for r in mine):
            cells = [index.get((series, reference, x)) for x in xs]
            body.append(
                [
                    series,
                    reference,
                    *("" if c is None else f"{c.mean:.3g} ± {c.std:.2g}" for c in cells),
                ]
            )
        header = ["series", "reference", *(f"{mine[0].x_name}={x:g}" for x in xs)]
        parts.append(f"### {experiment}\n\n" + markdown_table(header, body))
    return "\n\n".join(parts)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``approx``."""
    add_output(parser)
    parser.add_argument(
        "--experiments", nargs="+", choices=approx.EXPERIMENTS, default=list(approx.EXPERIMENTS)
    )
    parser.add_argument(
        "--features", nargs="+", type=int, default=[16, 32, 64, 128, 256, 512, 1024]
    )
    parser.add_argument(
        "--stds", nargs="+", type=float, default=[0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0]
    )
    parser.add_argument("--sketch-sizes", nargs="+", type=int, default=[4, 8, 16, 32, 64, 128])
    parser.add_argument("--degrees", nargs="+", type=int, default=[2, 4, 6, 8, 10, 12, 16])
    parser.add_argument("--draws", type=int, default=10)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument(
        "--std",
        nargs="+",
        type=float,
        default=[0.5, 1.0],
        help="σ of q, k in the performer/sketch/degree sweeps (one curve each)",
    )
    parser.add_argument("--causal", action="store_true")


def run(args: argparse.Namespace) -> str:
    """Run the experiments; write ``<out>/<tag>.{csv,md}`` and a figure per experiment."""
    settings = approx.ApproxSettings(
        length=args.length,
        heads=args.heads,
        head_dim=args.head_dim,
        draws=args.draws,
        causal=args.causal,
    )
    rows: list[ApproxRow] = []
    # experiment -> (rows(settings, values, suffix=...), the values swept)
    sweeps: dict[str, tuple[Callable[..., list[ApproxRow]], Sequence[int]]] = {
        "performer": (approx.performer_rows, args.features),
        "sketch": (approx.sketch_rows, args.sketch_sizes),
        "degree": (approx.degree_rows, args.degrees),
    }
    for experiment in args.experiments:
        if experiment == "scale":
            rows += approx.scale_rows(settings, args.stds)
            continue
        sweep, values = sweeps[experiment]
        for std in args.std:  # one curve per σ, named by it when there are several
            suffix = f" σ={std:g}" if len(args.std) > 1 else ""
            rows += sweep(replace(settings, std=std), values, suffix=suffix)
    shape = (
        f"B=1, H={settings.heads}, N={settings.length}, D=Dv={settings.head_dim}, "
        f"causal={settings.causal}, draws={settings.draws}"
    )
    meta = report.environment(
        torch.device("cpu"),
        command=args.command_line,
        inputs=shape,
        sweep_stds=args.std,
        dtype="float64",
        seeds="inputs: draw i; features: 10000 + i",
        spread="std over draws in tables; min-max band in figures",
    )
    text = markdown_tables(rows)
    tag = args.tag or "approximation"
    report.write_report(args.out, tag, meta, rows, text)
    caption = (
        f"N={settings.length}, H={settings.heads}, D={settings.head_dim}, "
        f"{settings.draws} draws, σ of q, k = {', '.join(map(str, args.std))} unless "
        f"varied, float64, lines = mean, bands = min-max over draws"
    )
    for experiment in dict.fromkeys(r.experiment for r in rows):
        plots.band_figure(
            figure_panels(rows, experiment),
            args.out / f"{tag}_{experiment}.png",
            title=f"approximation error: {experiment}",
            caption=caption,
            ncols=2 if experiment == "performer" else 1,
        )
    return text + "\n"
