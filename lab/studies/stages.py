"""A plan's ``grid:`` and ``stages:`` sections, checked into ``Stage`` objects (the grammar is in
``studies.sweep``'s docstring).

A stage is a list of variants run over every seed with one config stack and ``--set`` list; a
stage ``from`` another starts each run from the ``last.ckpt`` of the source stage's run with the
same seed (``fit``: ``--init_from``, weights only; ``test``: ``--ckpt_path`` with the variant's
attention as ``attention_override``). The checkpoint's path is written with ``runner.SEED`` in
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

# A stage's keys; ``from`` is a word of YAML, not of Python, hence the dict below.
STAGE_KEYS = ("from", "subcommand", "backends", "variants", "grid", "set", "config")
SUBCOMMANDS = ("fit", "test")
# A grid key is a dotted train.py option (model.init_args.width): one that names a config value.
DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
ATTENTION = "model.init_args.attention"
OVERRIDE = "model.init_args.attention_override"  # a test stage's attention (the ckpt keeps its own)


@dataclass(frozen=True)
class Stage:
    """One stage of a plan: its runs are ``variants`` x the plan's seeds.

    Attributes:
        name: the stage's name ("" for a plan without ``stages:``), its record and log folders'.
        variants: its variants, in run order (a grid's combinations after each backend).
        configs: its config stack.
        overrides: the plan's ``set``, then the stage's (the later wins, as in train.py).
        source: the stage its runs start from, or None.
        sources: each variant's source variant in ``source`` (by name).
    """

    name: str
    variants: tuple[Variant, ...]
    configs: tuple[str, ...]
    overrides: tuple[str, ...]
    source: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)

    def experiment(self, experiment: str) -> str:
        """Its runs' ``--experiment``: the plan's, ``-<stage>`` added in a staged plan."""
        return f"{experiment}-{self.name}" if self.name else experiment


def override_value(value: object) -> str:
    """A YAML value as train.py reads it after ``key=``: JSON for lists, maps, booleans, null."""
    return value if isinstance(value, str) else json.dumps(value)


def check_grid(grid: object, where: str = "grid") -> list[tuple[str, list[Any]]]:
    """A ``grid:`` section as (key, values) pairs, checked.

    Raises:
        ValueError: naming a key that is not a dotted override or a value list that is empty
            or not a list.
    """
    if not isinstance(grid, dict):
        raise ValueError(f"{where}: give a mapping of dotted train.py options to lists of values")
    for key, values in grid.items():
        if not isinstance(key, str) or not DOTTED.fullmatch(key):
            raise ValueError(
                f"{where}: key {key!r} is not a dotted train.py option (like model.init_args.width)"
            )
        if not isinstance(values, list) or not values:
            raise ValueError(f"{where}: {key}: give a non-empty list of values, not {values!r}")
    return list(grid.items())


def crossed(variants: Sequence[Variant], grid: Sequence[tuple[str, list[Any]]]) -> list[Variant]:
    """Each variant with each combination of the grid's values, in that order; a combination's
    values join the label (``softmax,width=64``) and the runs' tags (``info``)."""
    if not grid:
        return list(variants)
    lasts = [key.rsplit(".", 1)[-1] for key, _ in grid]
    # The key's last part labels it, unless two keys share it.
    names = [last if lasts.count(last) == 1 else key for last, (key, _) in zip(lasts, grid)]
    out = []
    for variant in variants:
        for values in itertools.product(*(v for _, v in grid)):
            shown = [f"{n}={override_value(v)}" for n, v in zip(names, values)]
            sets = [f"{key}={override_value(v)}" for (key, _), v in zip(grid, values)]
            out.append(
                replace(
                    variant,
                    name=",".join([variant.name, *shown]),
                    overrides=(*variant.overrides, *sets),
                    info={**variant.info, **dict(zip(names, values))},
                )
            )
    return out


def _backend(spec: str, subcommand: str) -> Variant:
    """A backend variant; a test stage swaps it into the checkpoint's model (override)."""
    if subcommand == "fit":
        return Variant.from_attention(spec)
    attention = json.dumps(parse_attention_spec(spec))
    return Variant(spec, overrides=(f"{OVERRIDE}={attention}",), subcommand="test")


def _order(specs: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The stages in plan order, each after the stage it starts from.

    Raises:
        ValueError: naming a ``from`` that is no stage, or a cycle.
    """
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


def _source(name: str, spec: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """Stage ``name``'s ``from``: (stage, variant or None)."""
    source = spec.get("from")
    if isinstance(source, dict):
        if set(source) - {"stage", "variant"} or "stage" not in source:
            raise ValueError(
                f"stages: {name}: from {source!r}; give a stage name or {{stage: S, variant: V}}"
            )
        variant = source.get("variant")
        return str(source["stage"]), None if variant is None else str(variant)
    return (None if source is None else str(source)), None


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
        source, chosen = _source(name, spec)
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
        )
        if source is not None:
            if built[source].variants[0].subcommand == "test":
                raise ValueError(
                    f"stages: {name}: from {source!r}, a test stage: it saves no checkpoint"
                )
            stage = _started_from(stage, built[source], chosen, experiment)
        built[name] = stage
    return list(built.values())


def last_checkpoint(stage: Stage, experiment: str, variant: str, seed: int | str) -> Path:
    """The ``last.ckpt`` of a run of ``stage`` (``seed``: ``SEED`` for the per-run template);
    its root as ``Runner.run_dir`` finds it (the stage's last ``checkpoint.root``)."""
    moved = [o.partition("=")[2] for o in stage.overrides if o.partition("=")[0] == CHECKPOINT_ROOT]
    root = Path(moved[-1] if moved else "checkpoints")
    return root / stage.experiment(experiment) / run_folder(variant, seed) / "last.ckpt"


def _started_from(stage: Stage, source: Stage, chosen: str | None, experiment: str) -> Stage:
    """``stage`` with each variant's checkpoint option (``fit``: ``init_from``; ``test``:
    ``ckpt_path``) set to its source run's ``last.ckpt``, the seed left to the runner."""
    sources, started = {}, []
    for variant in stage.variants:
        sources[variant.name] = _pick(stage.name, variant, chosen, source.variants)
        ckpt = last_checkpoint(source, experiment, sources[variant.name], SEED)
        key = "init_from" if variant.subcommand == "fit" else "ckpt_path"
        started.append(replace(variant, overrides=(*variant.overrides, f"{key}={ckpt}")))
    return replace(stage, variants=tuple(started), source=source.name, sources=sources)
