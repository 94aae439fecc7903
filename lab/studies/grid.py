"""A plan's ``grid:``: dotted train.py options, each with a list of values (or labelled values),
crossed with every variant of a stage (the grammar is in ``studies.sweep``'s docstring).

A combination's values join the variant's label (``softmax,width=64``), its overrides and its
runs' tags. A value that is no word (a list: ``[fc1, fc2]``) is best given a label
(``{tag: head, values: {frozen: [fc1, fc2]}}``): it then reads ``head=frozen`` in labels, run
folders and tags.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from lab.studies.runner import Variant

# A grid key is a dotted train.py option (model.init_args.width): one that names a config value.
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
TAG = re.compile(r"[A-Za-z_]\w*")  # a tag's name
LABEL = re.compile(r"[\w.-]+")  # a grid value's label: safe in a run's folder name


def override_value(value: object) -> str:
    """A YAML value as train.py reads it after ``key=``: JSON for lists, maps, booleans, null."""
    return value if isinstance(value, str) else json.dumps(value)


@dataclass(frozen=True)
class Axis:
    """One key of a grid: the option, the tag (and label) name of its values, and its values,
    each with the text that shows it in labels and run names and its tag's value."""

    key: str
    name: str
    values: tuple[Any, ...]
    shown: tuple[str, ...]
    tags: tuple[Any, ...]


def check_grid(grid: object, where: str = "grid") -> list[Axis]:
    """A ``grid:`` section as its axes, checked. A key's values are a list (each shown as
    ``override_value`` shows it) or ``{tag: NAME, values: [...] or {label: value, ...}}`` (NAME
    tags them instead of the key's last part; a label shows its value).

    Raises:
        ValueError: naming a key that is not a dotted override, a value list that is empty or not
            a list, or a long form with other keys, a bad tag name or a label not a word.
    """
    if not isinstance(grid, dict):
        raise ValueError(f"{where}: give a mapping of dotted train.py options to lists of values")
    axes = []
    for key, values in grid.items():
        if not isinstance(key, str) or not DOTTED.fullmatch(key):
            raise ValueError(
                f"{where}: key {key!r} is not a dotted train.py option (like model.init_args.width)"
            )
        name = key.rsplit(".", 1)[-1]
        if isinstance(values, dict) and "values" in values:
            if set(values) - {"tag", "values"}:
                raise ValueError(f"{where}: {key}: give {{tag: NAME, values: ...}}, not {values!r}")
            name = values.get("tag", name)
            if not isinstance(name, str) or not TAG.fullmatch(name):
                raise ValueError(f"{where}: {key}: tag {name!r} is not a word (like rank)")
            values = values["values"]
        if isinstance(values, dict) and values:
            bad = [v for v in values if not isinstance(v, str) or not LABEL.fullmatch(v)]
            if bad:
                raise ValueError(
                    f"{where}: {key}: value label {bad[0]!r} is not a word (like lora)"
                )
            labels = tuple(values)
            axes.append(Axis(key, name, tuple(values.values()), labels, labels))
            continue
        if not isinstance(values, list) or not values:
            raise ValueError(
                f"{where}: {key}: give a non-empty list of values, not {values!r} (or "
                "{tag: NAME, values: [...] or {label: value, ...}})"
            )
        shown = tuple(map(override_value, values))
        axes.append(Axis(key, name, tuple(values), shown, tuple(values)))
    return axes


def crossed(variants: Sequence[Variant], grid: Sequence[Axis]) -> list[Variant]:
    """Each variant with each combination of the grid's values, in that order; a combination's
    values join the label (``softmax,width=64``) and the runs' tags (``info``: a labelled
    value's label, else the value)."""
    if not grid:
        return list(variants)
    names = [axis.name for axis in grid]
    # The key's last part (or tag) labels it, unless two keys share it.
    names = [n if names.count(n) == 1 else axis.key for n, axis in zip(names, grid)]
    out = []
    for variant in variants:
        for cell in itertools.product(*(range(len(axis.values)) for axis in grid)):
            shown = [f"{n}={axis.shown[i]}" for n, axis, i in zip(names, grid, cell)]
            sets = [f"{axis.key}={override_value(axis.values[i])}" for axis, i in zip(grid, cell)]
            tags = [axis.tags[i] for axis, i in zip(grid, cell)]
            out.append(
                replace(
                    variant,
                    name=",".join([variant.name, *shown]),
                    overrides=(*variant.overrides, *sets),
                    info={**variant.info, **dict(zip(names, tags))},
                )
            )
    return out
