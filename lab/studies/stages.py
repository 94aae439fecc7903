"""A plan's ``grid:`` and ``stages:`` sections, checked into ``Stage`` objects (the grammar is in
``studies.sweep``'s docstring).

A grid's combinations join each variant's label (``softmax,width=64``), overrides and tags. A
stage ``from`` another gets its source checkpoint's path as an override with ``runner.SEED`` in
it, so a variant stays one value for every seed and the runner fills the seed in.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from attn_lightning.attention import parse_attention_spec
from lab.results.records import folder_name, run_folder
from lab.studies.runner import CHECKPOINT_ROOT, SEED, Variant

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
    """A ``grid:`` section as its axes, checked; a ValueError names the bad key or value."""
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


# A stage's keys; ``from`` is a word of YAML, not of Python, hence the dict below.
STAGE_KEYS: tuple[str, ...] = ("from", "subcommand", "backends", "variants", "grid", "set")
STAGE_KEYS += ("config", "seeds", "checkpoint", "start", "tags")
SUBCOMMANDS = ("fit", "test")
# Which of its source run's checkpoints a stage starts from: RunCheckpoint writes last.ckpt
# (checkpoint.save_last) and the best by its monitor as <checkpoint.filename>.ckpt; the default
# name, best-{step}, is known only after the run, so "best" needs a plain filename.
CHECKPOINTS = ("last", "best")
STARTS = ("init_from", "ckpt_path")  # train.py's own options; else a dotted config option
# The runner's own tags and the stage's name: a stage's tags: may not replace them.
OWN_TAGS = ("study", "variant", "seed", "stage")
FILENAME, SAVE_LAST = "checkpoint.filename", "checkpoint.save_last"
OVERRIDE = "model.init_args.attention_override"  # a test stage's attention (the ckpt keeps its own)


@dataclass(frozen=True)
class Stage:
    """One stage of a plan: its runs are ``variants`` x its seeds (None: the plan's)."""

    name: str  # "" for a plan without stages:; its record and log folders'
    variants: tuple[Variant, ...]
    configs: tuple[str, ...]
    overrides: tuple[str, ...]  # the plan's set, then the stage's (the later wins)
    source: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)  # variant -> source's variant
    source_seed: int | None = None  # a pinned source seed (None: the run's own)
    checkpoint: str = "last"
    start: str = "init_from"
    tags: Mapping[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] | None = None

    def experiment(self, experiment: str) -> str:
        """Its runs' ``--experiment``: the plan's, ``-<stage>`` added in a staged plan."""
        return f"{experiment}-{self.name}" if self.name else experiment


def _backend(spec: str, subcommand: str) -> Variant:
    """A backend variant; a test stage swaps it into the checkpoint's model (override)."""
    if subcommand == "fit":
        return Variant.from_attention(spec)
    attention = json.dumps(parse_attention_spec(spec))
    return Variant(spec, overrides=(f"{OVERRIDE}={attention}",), subcommand="test")


def _order(specs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The stages in plan order, each after its source (a ValueError: no such stage, a cycle)."""
    order: list[str] = []
    for name in specs:
        chain = [name]
        while (source := _source(chain[-1], specs[chain[-1]])[0]) is not None:
            if source not in specs:
                raise ValueError(
                    f"stages: {chain[-1]}: from {source!r} is not a stage; the stages are "
                    f"{list(specs)}"
                )
            if source in chain:
                raise ValueError(f"stages: a cycle of from: {' -> '.join([*chain, source])}")
            chain.append(source)
        order += [s for s in reversed(chain) if s not in order]
    return order


def _source(name: str, spec: Mapping[str, Any]) -> tuple[str | None, str | None, int | None]:
    """Stage ``name``'s ``from``: (stage, variant or None, seed or None)."""
    source = spec.get("from")
    if isinstance(source, dict):
        if set(source) - {"stage", "variant", "seed"} or "stage" not in source:
            raise ValueError(
                f"stages: {name}: from {source!r}; give a stage name or "
                "{stage: S, variant: V, seed: N} (variant and seed optional)"
            )
        variant, seed = source.get("variant"), source.get("seed")
        if seed is not None and (type(seed) is not int or seed < 0):
            raise ValueError(f"stages: {name}: from seed {seed!r}; give a seed (an int >= 0)")
        return str(source["stage"]), None if variant is None else str(variant), seed
    return (None if source is None else str(source)), None, None


def _pick(stage: str, variant: Variant, chosen: str | None, candidates: Sequence[Variant]) -> str:
    """The variant of the source stage that ``variant``'s runs start from (module docstring)."""
    names = [c.name for c in candidates]
    if chosen is not None:
        if chosen not in names:
            raise ValueError(f"stages: {stage}: from variant {chosen!r}; it has {names}")
        return chosen
    if variant.name in names:
        return variant.name
    # A grid's cell starts from the source's run of the same cell (width=64 from width=64, also
    # when this stage's grid adds keys: width=64,lr=0.1 from width=64).
    info = dict(variant.info)
    same = [c.name for c in candidates if c.info and dict(c.info).items() <= info.items()]
    if len(same) == 1:
        return same[0]
    if len(names) == 1:
        return names[0]
    raise ValueError(
        f"stages: {stage}: which source run does {variant.name!r} start from? Its source stage "
        f"has {names}; give from: {{stage: ..., variant: ...}}"
    )


def plan_stages(
    stages: object,
    *,
    configs: Sequence[str],
    overrides: Sequence[str],
    backends: Sequence[str],
    variants: Sequence[str],
    grid: object,
    experiment: str,
) -> list[Stage]:
    """A plan's stages in run order; without a ``stages:`` section its one unnamed stage (the
    plan's backends and config overlays crossed with its grid). ``experiment``: the plan's runs'
    ``--experiment`` (a stage's checkpoints are under ``Stage.experiment`` of it).

    Raises:
        ValueError: one line naming the bad value and what is allowed (module docstring).
    """
    specs: dict[str, dict[str, Any]] = {"": {}} if stages is None else {}
    if stages is not None:
        if not isinstance(stages, dict) or not stages:
            keys = ", ".join(STAGE_KEYS)
            raise ValueError(f"stages: give a mapping of stage names to {{{keys}}}")
        for name, spec in stages.items():
            spec = {} if spec is None else spec
            if not isinstance(spec, dict) or not isinstance(name, str):
                raise ValueError(f"stages: {name!r}: give a mapping of {', '.join(STAGE_KEYS)}")
            folder_name(name, "stages: the stage")  # its records' and logs' folder
            unknown = [k for k in spec if k not in STAGE_KEYS]
            if unknown:
                raise ValueError(
                    f"stages: {name}: unknown key {unknown[0]!r}; the keys are "
                    f"{', '.join(STAGE_KEYS)}"
                )
            specs[name] = spec
    built: dict[str, Stage] = {}
    for name in _order(specs):
        spec = specs[name]
        subcommand = spec.get("subcommand", "fit")
        if subcommand not in SUBCOMMANDS:
            raise ValueError(
                f"stages: {name}: subcommand {subcommand!r}; the subcommands are "
                f"{', '.join(SUBCOMMANDS)}"
            )
        source, chosen, seed = _source(name, spec)
        if subcommand == "test" and source is None:
            raise ValueError(f"stages: {name}: a test stage tests a checkpoint: give from: STAGE")
        own = "backends" in spec or "variants" in spec
        names = spec.get("backends", []) if own else backends
        overlays = spec.get("variants", []) if own else variants
        where = f"stages: {name}: grid" if name and "grid" in spec else "grid"
        stage_grid = check_grid(spec.get("grid", grid or {}), where)
        listed = [_backend(str(s), subcommand) for s in names]
        listed += [replace(Variant.from_config(p), subcommand=subcommand) for p in overlays]
        if not listed:
            raise ValueError(f"stages: {name}: no backends or variants (give backends: [...])")
        stage_configs = spec.get("config", configs)
        stage_configs = [stage_configs] if isinstance(stage_configs, str) else stage_configs
        stage = Stage(
            name,
            tuple(crossed(listed, stage_grid)),
            tuple(map(str, stage_configs)),
            (*overrides, *map(str, spec.get("set", []))),
            tags=_tags(name, spec.get("tags", {}), [axis.name for axis in stage_grid]),
            seeds=None if "seeds" not in spec else _seeds(name, spec["seeds"]),
        )
        if source is None:
            extra = [key for key in ("checkpoint", "start") if key in spec]
            if extra:
                raise ValueError(f"stages: {name}: {extra[0]} goes with from: (no source here)")
        else:
            if built[source].variants[0].subcommand == "test":
                raise ValueError(
                    f"stages: {name}: from {source!r}, a test stage: it saves no checkpoint"
                )
            checkpoint, start = _starting(name, spec, subcommand, built[source])
            stage = replace(stage, source_seed=seed, checkpoint=checkpoint, start=start)
            stage = _started_from(stage, built[source], chosen, experiment)
        built[name] = stage
    return list(built.values())


def _seeds(name: str, seeds: object) -> tuple[int, ...]:
    """Stage ``name``'s ``seeds:``, checked: a non-empty list of ints >= 0."""
    if not isinstance(seeds, list) or not seeds or any(type(s) is not int or s < 0 for s in seeds):
        raise ValueError(f"stages: {name}: seeds {seeds!r}; give a list of seeds (ints >= 0)")
    return tuple(seeds)


def _tags(name: str, tags: object, grid_tags: Sequence[str]) -> dict[str, Any]:
    """Stage ``name``'s ``tags:``, checked: words to plain values, none the runner's own
    (``OWN_TAGS``) or a grid's (its cells tag those)."""
    if not isinstance(tags, dict):
        raise ValueError(f"stages: {name}: tags: give a mapping of tag names to values")
    for key, value in tags.items():
        if not isinstance(key, str) or not TAG.fullmatch(key) or key in OWN_TAGS:
            raise ValueError(
                f"stages: {name}: tags: {key!r} is not a tag name of its own (a word, not "
                f"{', '.join(OWN_TAGS)})"
            )
        if key in grid_tags:
            raise ValueError(f"stages: {name}: tags: {key!r} is a grid's tag: its cells set it")
        if not isinstance(value, str | int | float | bool):
            raise ValueError(
                f"stages: {name}: tags: {key}: {value!r}; give a string, number or boolean"
            )
    return dict(tags)


def _last(overrides: Sequence[str], key: str) -> str | None:
    """The value of the last ``key=`` among ``overrides`` (the one train.py keeps), or None."""
    found = [o.partition("=")[2] for o in overrides if o.partition("=")[0] == key]
    return found[-1] if found else None


def _starting(
    name: str, spec: Mapping[str, Any], subcommand: str, source: Stage
) -> tuple[str, str]:
    """Stage ``name``'s ``checkpoint:`` and ``start:``, checked against its ``source`` stage.

    Raises:
        ValueError: a checkpoint not in ``CHECKPOINTS`` or one its source does not write (last
            with ``checkpoint.save_last=false``; best without a plain ``checkpoint.filename``),
            a start that is no option, or ``init_from`` in a test stage.
    """
    checkpoint = spec.get("checkpoint", "last")
    if checkpoint not in CHECKPOINTS:
        raise ValueError(
            f"stages: {name}: checkpoint {checkpoint!r}; the checkpoints are "
            f"{', '.join(CHECKPOINTS)}"
        )
    if checkpoint == "last" and str(_last(source.overrides, SAVE_LAST)).lower() == "false":
        raise ValueError(
            f"stages: {name}: checkpoint last: its source stage {source.name} sets "
            f"{SAVE_LAST}=false; give checkpoint: best or let it save last.ckpt"
        )
    filename = _last(source.overrides, FILENAME)
    if checkpoint == "best" and (filename is None or not LABEL.fullmatch(filename)):
        raise ValueError(
            f"stages: {name}: checkpoint best: its source stage {source.name} names its best "
            f"checkpoint only when run ({FILENAME}={filename or 'best-{step}'}); set "
            f"{FILENAME}=best there"
        )
    default = "init_from" if subcommand == "fit" else "ckpt_path"
    start = spec.get("start", default)
    if not isinstance(start, str) or not (start in STARTS or DOTTED.fullmatch(start)):
        raise ValueError(
            f"stages: {name}: start {start!r}; give {', '.join(STARTS)} or a dotted config "
            "option (like model.init_args.base_checkpoint)"
        )
    if start == "init_from" and subcommand == "test":
        raise ValueError(f"stages: {name}: start init_from is a fit's; a test stage has ckpt_path")
    return checkpoint, start


def checkpoint_file(
    stage: Stage, experiment: str, variant: str, seed: int | str, checkpoint: str = "last"
) -> Path:
    """A checkpoint of a run of ``stage`` (``seed``: ``SEED`` for the per-run template):
    ``last.ckpt`` or the best, ``<checkpoint.filename>.ckpt``; its root as ``Runner.run_dir``
    finds it (the stage's last ``checkpoint.root``)."""
    root = Path(_last(stage.overrides, CHECKPOINT_ROOT) or "checkpoints")
    file = "last" if checkpoint == "last" else _last(stage.overrides, FILENAME)
    return root / stage.experiment(experiment) / run_folder(variant, seed) / f"{file}.ckpt"


def source_checkpoint(
    stage: Stage, source: Stage, experiment: str, variant: str, seed: int | str
) -> tuple[Path, int | str]:
    """The checkpoint that the run of ``stage``'s ``variant`` at ``seed`` starts from, and its
    source run's seed (the pinned ``source_seed``, else ``seed``)."""
    seed = seed if stage.source_seed is None else stage.source_seed
    name = stage.sources[variant]
    return checkpoint_file(source, experiment, name, seed, stage.checkpoint), seed


def _started_from(stage: Stage, source: Stage, chosen: str | None, experiment: str) -> Stage:
    """``stage`` with each variant's ``start`` option set to its source run's checkpoint, the
    seed (unless pinned) left to the runner. A test that starts elsewhere than ``ckpt_path``
    tests the model as that option builds it (``ckpt_path=initial``)."""
    sources = {v.name: _pick(stage.name, v, chosen, source.variants) for v in stage.variants}
    stage = replace(stage, source=source.name, sources=sources)
    started = []
    for variant in stage.variants:
        ckpt, _ = source_checkpoint(stage, source, experiment, variant.name, SEED)
        options = [f"{stage.start}={ckpt}"]
        if variant.subcommand == "test" and stage.start != "ckpt_path":
            options.append("ckpt_path=initial")
        started.append(replace(variant, overrides=(*variant.overrides, *options)))
    return replace(stage, variants=tuple(started))
