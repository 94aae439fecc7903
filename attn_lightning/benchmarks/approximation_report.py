"""Tables and figure panels of the ``approx`` experiments (rows from ``approximation``)."""

from __future__ import annotations

from collections.abc import Sequence

from attn_lightning.benchmarks.approximation import ApproxRow
from attn_lightning.benchmarks.report import markdown_table


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
