"""Paired differences between a variant and its control over the seeds both ran.

Runs with the same seed share the initialisation stream, the batch order and the data, so the
per-seed difference removes that shared variance. Every paired interval is the same at every n:
the mean Δ with a 95 % Student-t interval (``n − 1`` degrees of freedom), exact when Δ is normal.
``seed_deltas`` adds, for bimodal or bounded outcomes (a reversal run converges or not), every
per-seed Δ, how many are positive / negative / zero, and the exact two-sided sign-test p-value
of the signs, which assumes nothing about Δ's distribution.

Not a percentile bootstrap: at n = 5 its "95 %" interval covers only ~83 % (docs/statistics.md;
``tests/lab/results/test_paired`` simulates both). ``write_paired``, a plan page's ``paired``
report kind, writes each seed's value and Δ (``seed_rows``, ``delta_rows``) from run records,
with the interval's own t-test p (``t_test``) and the smallest Δ it detects at 80 % power
(``detectable_effect``): what "not resolved at this n" could have seen. ``holm`` adjusts a
family of such p-values (detection's multiplicity table).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats

from attn_lightning.records.files import markdown_records, write_csv
from lab.results.records import OK, RunResult, load_runs
from lab.results.tables import column, format_mean_std, mean_std, number_format

LEVEL = 0.95  # every interval's coverage: the tables' titles and notes say "95 %"

# What a ``SeedDeltas.format`` cell's interval and p-value are, for a table's caption.
SEED_INTERVAL_NOTE = (
    "95 % Student-t interval of the mean Δ (n − 1 degrees of freedom; a percentile bootstrap "
    "would cover only ~83 % at n = 5: docs/statistics.md); sign p: the exact two-sided sign test "
    "of the nonzero Δ"
)

# What a Δ table's "t p" and "detectable Δ" columns are (``t_test``, ``detectable_effect``).
DETECTABLE_NOTE = (
    "detectable Δ, 80 % power: the smallest true |mean Δ| that test detects with probability 0.8 "
    "at this n and spread, (t_{0.975, n−1} + t_{0.8, n−1}) · sd(Δ) / √n — an interval that "
    "includes 0 does not exclude a Δ below it (docs/statistics.md)."
)
POWER_NOTE = (
    "t p: the two-sided paired t-test of mean Δ = 0 (below 0.05 exactly when the interval "
    f"excludes 0), unadjusted for the other rows; {DETECTABLE_NOTE}"
)


def t_interval(values: Sequence[float]) -> tuple[float, float]:
    """``mean ± t_{(1+LEVEL)/2, n−1} · sd / √n`` of ``values``; (mean, mean) for one value."""
    mean = statistics.fmean(values)
    if len(values) == 1:
        return mean, mean
    half = float(stats.t.ppf((1 + LEVEL) / 2, len(values) - 1)) * statistics.stdev(values)
    half /= math.sqrt(len(values))
    return mean - half, mean + half


def sign_test(positive: int, negative: int) -> float:
    """Exact two-sided sign-test p-value of ``positive`` vs ``negative`` signs (zeros dropped):
    ``min(1, 2 · P(X ≤ min(positive, negative)))`` for ``X ~ Binomial(positive + negative, ½)``;
    1.0 when no Δ is nonzero."""
    n = positive + negative
    if n == 0:
        return 1.0
    return min(1.0, 2.0 * float(stats.binom.cdf(min(positive, negative), n, 0.5)))


def t_test(values: Sequence[float]) -> float:
    """Two-sided one-sample t-test p-value of mean Δ = 0 (the interval's own test: p < 1 − LEVEL
    exactly when the interval excludes 0); a spread of 0 gives 1.0 at mean 0, else 0.0."""
    if len(values) < 2:
        raise ValueError(f"a t-test needs at least 2 values, got {len(values)}")
    if statistics.stdev(values) == 0:
        return 1.0 if statistics.fmean(values) == 0 else 0.0
    return float(stats.ttest_1samp(list(values), 0.0).pvalue)


def detectable_effect(values: Sequence[float], *, power: float = 0.8) -> float:
    """The smallest true |mean Δ| that the two-sided ``LEVEL`` paired t-test on ``len(values)``
    seeds with this spread detects with probability ``power``:
    ``(t_{(1+LEVEL)/2, n−1} + t_{power, n−1}) · sd / √n`` (the usual approximation of the
    noncentral t). What a "not resolved" interval could have seen: a smaller Δ is not excluded."""
    n = len(values)
    if n < 2:
        raise ValueError(f"a detectable effect needs at least 2 values, got {n}")
    quantiles = stats.t.ppf((1 + LEVEL) / 2, n - 1) + stats.t.ppf(power, n - 1)
    return float(quantiles) * statistics.stdev(values) / math.sqrt(n)


def holm(
    p_values: Mapping[str, float], *, alpha: float = 1 - LEVEL
) -> dict[str, tuple[float, bool]]:
    """Holm's step-down correction over the whole family: ``{name: (threshold, survives)}`` in
    ascending order of p. The i-th (from 0) has threshold ``alpha / (m − i)``; names survive
    while their p is ≤ their threshold, and the first that fails stops it (every later name
    fails too, even one under its own threshold). Family-wise error ≤ ``alpha`` under any
    dependence between the comparisons."""
    out, failed = {}, False
    for i, name in enumerate(sorted(p_values, key=lambda name: p_values[name])):
        threshold = alpha / (len(p_values) - i)
        failed = failed or p_values[name] > threshold
        out[name] = (threshold, not failed)
    return out


def format_p(p: float) -> str:
    """``0.030``; below 0.001 in powers of ten (``3e-08``), where three decimals would show 0."""
    return f"{p:.3f}" if p >= 1e-3 else f"{p:.0e}"


@dataclass(frozen=True)
class SeedDeltas:
    """Per-seed ``variant − control`` values, their signs (and ``sign_test``), and the ``LEVEL``
    Student-t interval of the mean (``low``, ``high``: both the mean for one seed)."""

    deltas: dict[int, float]  # {seed: Δ} over the seeds both ran, in seed order
    low: float
    high: float

    @property
    def n(self) -> int:
        return len(self.deltas)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.deltas.values())

    @property
    def positive(self) -> int:
        return sum(d > 0 for d in self.deltas.values())

    @property
    def negative(self) -> int:
        return sum(d < 0 for d in self.deltas.values())

    @property
    def zero(self) -> int:
        return self.n - self.positive - self.negative

    @property
    def sign_p(self) -> float:
        return sign_test(self.positive, self.negative)

    def format(self, *, scale: float = 1.0, digits: int = 2) -> str:
        """``−51.41 [−117.55, +14.73] (n=5: 1+ 4− 0=, sign p 0.38)``; one seed has neither
        an interval nor a p-value: ``+0.25 (n=1: 1+ 0− 0=)``."""
        body = self._interval(scale, digits)
        signs = f"{self.positive}+ {self.negative}− {self.zero}="
        if self.n > 1:
            signs += f", sign p {self.sign_p:.2f}"
        return f"{body} (n={self.n}: {signs})"

    def _interval(self, scale: float, digits: int) -> str:
        """``+m [+l, +h]`` (no interval for one seed) with ``digits`` decimals, or 3 significant
        figures when the largest would show as 0 at those decimals (``number_format``)."""
        spec = "+" + number_format(
            max(abs(self.mean), abs(self.low), abs(self.high)) * scale, digits
        )
        body = f"{self.mean * scale:{spec}}"
        if self.n > 1:
            body += f" [{self.low * scale:{spec}}, {self.high * scale:{spec}}]"
        return body

    def per_seed(self, *, scale: float = 1.0, digits: int = 2) -> str:
        """``s0 −46.88, s1 +3.12, ...``: every seed's Δ (``number_format`` of the largest)."""
        largest = max((abs(d) for d in self.deltas.values()), default=0.0)
        spec = "+" + number_format(largest * scale, digits)
        return ", ".join(f"s{s} {d * scale:{spec}}" for s, d in self.deltas.items())


def seed_deltas(variant: Mapping[int, float], control: Mapping[int, float]) -> SeedDeltas | None:
    """``variant[s] − control[s]`` over the shared seeds with the Student-t interval of their
    mean (module doc); None when no seed is shared."""
    seeds = sorted(set(variant) & set(control))
    if not seeds:
        return None
    deltas = {s: variant[s] - control[s] for s in seeds}
    return SeedDeltas(deltas, *t_interval(list(deltas.values())))


class PairedDelta(SeedDeltas):
    """The per-seed Δ of a roughly normal outcome (``paired_delta``): the same t-interval, shown
    without the sign count."""

    def format(self, *, scale: float = 1.0, digits: int = 4) -> str:
        """``+0.0012 [-0.0003, +0.0027] (n=5)``; a single pair has no interval."""
        return f"{self._interval(scale, digits)} (n={self.n})"


def paired_delta(variant: Mapping[int, float], control: Mapping[int, float]) -> PairedDelta | None:
    """``variant[s] − control[s]`` over the seeds ``s`` in both with the interval
    ``mean ± t_{(1+LEVEL)/2, n−1} · sd / √n`` (one pair: the difference alone, no spread to
    estimate); None when none is shared."""
    got = seed_deltas(variant, control)
    return None if got is None else PairedDelta(got.deltas, got.low, got.high)


def per_seed(results: Sequence[RunResult], name: str, key: str) -> dict[int, float]:
    """``{seed: value of key}`` over the finished runs of variant ``name`` that report it."""
    return {
        r.seed: v
        for r in results
        if r.variant == name and r.status == OK and (v := r.value(key)) is not None
    }


def delta_title(key: str) -> str:
    """The title of the "Δ vs control" column of metric ``key``."""
    return f"Δ {column(key).title} vs control [95 % CI]"


def comparisons(
    results: Sequence[RunResult], controls: Mapping[str, str], key: str
) -> dict[str, dict[str, Any]]:
    """Per variant whose control (``controls[variant]``) also ran: ``{control, Δ vs control}``.

    The Δ of metric ``key`` is paired by seed over the finished runs of both, in its table
    column's scale and digits (``+0.012 [-0.004, +0.028] (n=3)``); None (``–``) when they share
    no seed.
    """
    ran, shown = {r.variant for r in results}, column(key)
    out: dict[str, dict[str, Any]] = {}
    for name, control in controls.items():
        if name in ran and control in ran:
            delta = paired_delta(per_seed(results, name, key), per_seed(results, control, key))
            cell = None if delta is None else delta.format(scale=shown.scale, digits=shown.digits)
            out[name] = {"control": f"`{control}`", delta_title(key): cell}
    return out


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
        seconds = {r.seed: r.seconds for r in runs if r.variant == name and r.status == OK}
        row: dict[str, Any] = {label: name, "seeds": " ".join(map(str, sorted(seconds))) or "–"}
        for key in metrics:
            shown = column(key)
            values = per_seed(runs, name, key)
            ordered = [values[s] for s in sorted(values)]
            row[f"{shown.title} (mean ± std)"] = format_mean_std(
                *mean_std(ordered), scale=shown.scale, digits=shown.digits
            )
            row[f"{shown.title}, per seed"] = _joined(
                ordered, scale=shown.scale, digits=shown.digits
            )
        row["fit time (s), per seed"] = " / ".join(
            "–" if seconds[s] is None else f"{seconds[s]:.0f}" for s in sorted(seconds)
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
    seed both finished, the sign count with its sign-test p, the mean Δ with its 95 %
    t-interval, the t-test p (``t_test``) and the smallest Δ detectable at 80 % power at that n
    (``detectable_effect``); one seed has none of the last three, no seed ``–`` everywhere."""
    rows = []
    for name in names:
        if name == control:
            continue
        row: dict[str, Any] = {f"{label} − {control}, paired by seed": name}
        for key in metrics:
            shown = column(key)
            deltas = seed_deltas(per_seed(runs, name, key), per_seed(runs, control, key))
            title, spec = shown.title, f"+.{shown.digits}f"
            cells = dict.fromkeys(
                (f"{title} {c}" for c in ("Δ per seed", "sign count", "mean Δ [95 % t]")), "–"
            )
            cells[f"{title} t p"] = cells[f"{title} detectable Δ, 80 % power"] = "–"
            if deltas is not None:
                values = list(deltas.deltas.values())
                cells[f"{title} Δ per seed"] = _joined(
                    values, scale=shown.scale, digits=shown.digits, sign=True
                )
                cells[f"{title} sign count"] = sign_count(values)
                cells[f"{title} mean Δ [95 % t]"] = format(deltas.mean * shown.scale, spec)
            if deltas is not None and deltas.n > 1:
                low, high = (format(x * shown.scale, spec) for x in (deltas.low, deltas.high))
                cells[f"{title} mean Δ [95 % t]"] += f" [{low}, {high}]"
                cells[f"{title} sign count"] += f", sign p {deltas.sign_p:.2f}"
                cells[f"{title} t p"] = format_p(t_test(values))
                effect = detectable_effect(values) * shown.scale
                cells[f"{title} detectable Δ, 80 % power"] = f"{effect:.{shown.digits}f}"
            row.update(cells)
        rows.append(row)
    return rows


# The image study's page, the one plan page of this kind: its metrics unless the page names others.
DEFAULT_METRICS = ("test/bits_per_dim", "test/completion_bpd")


def write_paired(
    roots: Sequence[Path],
    out: Path,
    *,
    command: str,
    control: str | None = None,
    metrics: Sequence[str] = DEFAULT_METRICS,
    variants: Sequence[str] | None = None,
) -> list[Path]:
    """Write ``<out>.md``, ``<out>.csv`` and (with a ``control``) ``<out>_deltas.csv`` from the
    records under ``roots``; returns them. ``variants``: the table's rows in order (default:
    every variant recorded); ``command``: the page's "regenerate with" line.

    Raises:
        FileNotFoundError: no run record under ``roots``.
        ValueError: a variant or metric the records do not have, naming what they have.
    """
    where = ", ".join(f"`{root.as_posix()}/`" for root in roots)
    runs = [run for root in roots for run in load_runs(root)]
    if not runs:
        raise FileNotFoundError(f"no run records (record.json) under {where}")
    present = list(dict.fromkeys(r.variant for r in runs))
    names = list(variants) if variants else present
    unknown = [n for n in names + ([control] if control else []) if n not in present]
    if unknown:
        raise ValueError(f"{where} has no runs of {unknown}; it has {present}")
    reported = {k for r in runs for k in r.metrics}
    missing = [m for m in metrics if m not in reported]
    if missing:
        raise ValueError(f"{where} has no metric {missing}; it has {sorted(reported)}")
    per_variant = seed_rows(runs, names, metrics, label="backend")
    paired = delta_rows(runs, names, control, metrics, label="backend") if control else []
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        f"From the run records in {where} (finished runs only), no training. "
        "Mean ± std over seeds, every seed's value beside it; fit time is `train.py`'s own.\n",
        markdown_records(per_variant),
    ]
    if paired:
        lines += [
            "",
            f"Paired by seed (the same seed: the same data order and initialisation stream): "
            f"each backend's value minus `{control}`'s on every seed both finished, how many "
            f"Δ are positive / negative, and the mean Δ [{SEED_INTERVAL_NOTE}]. {POWER_NOTE}\n",
            markdown_records(paired),
        ]
    written = [write_csv(out.with_name(out.name + ".csv"), per_variant)]  # makes the folder
    if paired:
        written.append(write_csv(out.with_name(out.name + "_deltas.csv"), paired))
    page = out.with_name(out.name + ".md")
    page.write_text("\n".join(lines) + "\n")
    return [page, *written]
