"""A plan's ``select:`` section: tune grid keys on a few seeds, then run the other seeds only at
the cell chosen on validation — "the learning rate chosen on validation from a small grid, n seeds
at the chosen one" without paying the whole grid for every seed::

    select:
      keys: [model.init_args.lr]   # grid keys chosen (every other grid key stays its own row)
      metric: val/query_acc        # read from the tuning seeds' records; never a test/ metric
      seeds: [0]                   # the seeds that run the whole grid
      direction: max               # max (default) or min

Variants that differ only in ``keys`` form a group; its chosen member has the best mean ``metric``
over the tuning seeds' runs that have it (ties: the first in the grid's order, so the smaller of
an ascending list). A group with no such run yet runs no other seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import fmean

from lab.results.records import RunResult
from lab.studies.runner import Variant

Jobs = list[tuple[Variant, int]]
KEYS = ("keys", "metric", "seeds", "direction")


@dataclass(frozen=True)
class Select:
    """A checked ``select:`` section."""

    keys: tuple[str, ...]
    metric: str
    seeds: tuple[int, ...]
    direction: str = "max"


def check_select(spec: object, grid: Sequence[str], seeds: Sequence[int]) -> Select | None:
    """``spec`` checked against the plan's grid keys and seeds (None: no section); a ValueError
    names the value and what is allowed."""
    if spec is None:
        return None
    if (
        not isinstance(spec, Mapping)
        or set(spec) - set(KEYS)
        or not {"keys", "metric"} <= set(spec)
    ):
        raise ValueError(
            f"select: give {{keys: [GRID KEY, ...], metric: M, seeds: [N]}}, not {spec!r}"
        )
    keys, metric = spec["keys"], spec["metric"]
    if not isinstance(keys, list) or not keys or any(k not in grid for k in keys):
        raise ValueError(f"select: keys {keys!r}: give a list of the grid's keys, {list(grid)}")
    if not isinstance(metric, str) or metric.startswith("test/"):
        raise ValueError(
            f"select: metric {metric!r}: give a validation metric (a test/ one would choose on the "
            "numbers the page reports)"
        )
    tuning = spec.get("seeds", [min(seeds)])
    if not isinstance(tuning, list) or not tuning or any(s not in seeds for s in tuning):
        raise ValueError(
            f"select: seeds {tuning!r}: give a list of the plan's seeds, {list(seeds)}"
        )
    direction = spec.get("direction", "max")
    if direction not in ("max", "min"):
        raise ValueError(f"select: direction {direction!r}: give max or min")
    return Select(tuple(keys), metric, tuple(tuning), direction)


def _group(variant: Variant, keys: Sequence[str]) -> tuple[object, ...]:
    # A grid cell's values are the variant's last overrides (stages.crossed): without the tuned
    # keys', what is left names its group.
    kept = tuple(o for o in variant.overrides if o.split("=", 1)[0] not in keys)
    return variant.configs, variant.subcommand, kept


def chosen(variants: Sequence[Variant], runs: Sequence[RunResult], select: Select) -> list[Variant]:
    """Each group's chosen variant (module docstring), in the order of ``variants``."""
    values: dict[str, list[float]] = {}
    for run in runs:
        if run.seed in select.seeds and (value := run.value(select.metric)) is not None:
            values.setdefault(run.variant, []).append(value)
    groups: dict[tuple[object, ...], list[Variant]] = {}
    for variant in variants:
        groups.setdefault(_group(variant, select.keys), []).append(variant)
    sign = 1.0 if select.direction == "max" else -1.0
    best = []
    for members in groups.values():
        scored = [
            (sign * fmean(values[m.name]), -i) for i, m in enumerate(members) if m.name in values
        ]
        if scored:
            best.append(members[-max(scored)[1]])
    return [v for v in variants if v in best]


def run_selected(
    variants: Sequence[Variant],
    seeds: Sequence[int],
    select: Select | None,
    run: Callable[[Jobs], list[RunResult]],
) -> list[RunResult]:
    """``run`` every (variant, seed), or with ``select`` the tuning seeds' first, then the other
    seeds at each group's chosen variant; the results in that order."""
    if select is None:
        return run([(v, s) for v in variants for s in seeds])
    first = run([(v, s) for v in variants for s in seeds if s in select.seeds])
    rest = [s for s in seeds if s not in select.seeds]
    return [*first, *run([(v, s) for v in chosen(variants, first, select) for s in rest])]
