"""Per-seed tables of a unimodal study: every seed's value, and every seed's Δ vs a control.

For outcomes that do not split into modes (bits/dim of an image model, a detection mAP), a
reader checking a claim wants each seed's number beside the ``mean ± std``, and a comparison
paired by seed (the same seed gives the same data order and initialisation stream) with the
sign of every Δ. ``seed_rows`` gives one row per variant (``mean ± std`` and the per-seed values
of each metric, the fit time per seed); ``delta_rows`` one row per variant other than the
control (per-seed Δ, sign counts, and the percentile-bootstrap interval of the mean Δ from
``results.paired.seed_deltas`` when at least ``MIN_INTERVAL_SEEDS`` seeds are paired: with
three, a bootstrap interval is little more than the smallest and largest Δ, so the sign count
says what there is to say). Values are shown in each metric's table scale and digits
(``results.tables.column``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attn_lightning.results.paired import per_seed, seed_deltas
from attn_lightning.results.records import RunResult
from attn_lightning.results.tables import column, format_mean_std, mean_std

MIN_INTERVAL_SEEDS = 5


def sign_count(deltas: Sequence[float]) -> str:
    """``2+ 0− of 3 (1 equal)``: how many Δ are positive, negative, zero (said only when any)."""
    up, down = sum(d > 0 for d in deltas), sum(d < 0 for d in deltas)
    equal = len(deltas) - up - down
    return f"{up}+ {down}− of {len(deltas)}" + (f" ({equal} equal)" if equal else "")


def _joined(values: Sequence[float], *, scale: float, digits: int, sign: bool = False) -> str:
    spec = f"{'+' if sign else ''}.{digits}f"
    return " / ".join(format(v * scale, spec) for v in values) or "–"


def seed_rows(
    runs: Sequence[RunResult], names: Sequence[str], metrics: Sequence[str], *, label: str
) -> list[dict[str, Any]]:
    """Per variant in ``names``: its finished seeds, then per metric ``mean ± std`` and every
    seed's value, then the fit time (s) per seed. Crashed runs are left out (their count is in
    the sweep's own table)."""
    rows = []
    for name in names:
        row: dict[str, Any] = {label: name}
        seeds: list[int] = sorted({r.seed for r in runs if r.variant == name and r.status == "ok"})
        row["seeds"] = " ".join(map(str, seeds)) or "–"
        for key in metrics:
            shown = column(key)
            values = per_seed(runs, name, key)
            ordered = [values[s] for s in sorted(values)]
            mean, std = mean_std(ordered)
            row[f"{shown.title} (mean ± std)"] = format_mean_std(
                mean, std, scale=shown.scale, digits=shown.digits
            )
            row[f"{shown.title}, per seed"] = _joined(
                ordered, scale=shown.scale, digits=shown.digits
            )
        seconds = {r.seed: r.seconds for r in runs if r.variant == name and r.status == "ok"}
        row["fit time (s), per seed"] = " / ".join(
            "–" if seconds[s] is None else f"{seconds[s]:.0f}" for s in seeds
        )
        rows.append(row)
    return rows


def delta_rows(
    runs: Sequence[RunResult],
    names: Sequence[str],
    control: str,
    metrics: Sequence[str],
    *,
    label: str,
) -> list[dict[str, Any]]:
    """Per variant in ``names`` other than ``control``: per metric, its Δ vs ``control`` on every
    seed both finished, the sign count, and the bootstrap interval of the mean Δ (given with
    ``MIN_INTERVAL_SEEDS`` or more seeds, else ``–``)."""
    rows = []
    for name in names:
        if name == control:
            continue
        row: dict[str, Any] = {f"{label} − {control}, paired by seed": name}
        for key in metrics:
            shown = column(key)
            deltas = seed_deltas(per_seed(runs, name, key), per_seed(runs, control, key))
            title = shown.title
            if deltas is None:
                row[f"{title} Δ per seed"] = row[f"{title} sign count"] = "–"
                row[f"{title} mean Δ [95 % bootstrap]"] = "–"
                continue
            row[f"{title} Δ per seed"] = _joined(
                list(deltas.deltas.values()), scale=shown.scale, digits=shown.digits, sign=True
            )
            row[f"{title} sign count"] = sign_count(list(deltas.deltas.values()))
            mean = f"{deltas.mean * shown.scale:+.{shown.digits}f}"
            if deltas.n >= MIN_INTERVAL_SEEDS:
                low, high = (
                    f"{x * shown.scale:+.{shown.digits}f}" for x in (deltas.low, deltas.high)
                )
                mean += f" [{low}, {high}]"
            else:
                mean += f" (n = {deltas.n}: no interval)"
            row[f"{title} mean Δ [95 % bootstrap]"] = mean
        rows.append(row)
    return rows
