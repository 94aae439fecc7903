"""The detection study's variants, how two of them are compared, and the grids around one.

A variant is ``configs/detection/<name>.yaml`` (``CONFIGS``) stacked on its ``base.yaml``;
``STUDY_VARIANTS`` is the study in table order and ``CONTROLS`` names the variant each one
differs from in one thing only. A comparison is paired by seed (``results.paired``): per seed,
the variant's ``COMPARED`` metric minus its control's.

A sensitivity grid centres on an optimization variant's own point and varies λ, K and the random
tokens (``GRID``) one option at a time (the ablation ladder likewise with ``ABLATIONS``: one
ingredient of the paper's form swapped). A point is the variant's overlay plus an override that
replaces the spec of every optimization site, named ``<variant>@<option>=<value>,...`` after the
options that differ from the own point (which keeps the plain name).
"""

from __future__ import annotations

import inspect
import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from attn_lightning.attention.optimization import OptimizationAttention
from attn_lightning.models.detr import SITES
from attn_lightning.records.files import markdown_table
from attn_lightning.tasks.detection import site_specs
from lab.results import paired
from lab.results.records import RunResult
from lab.results.tables import column, format_mean_std, mean_std
from lab.studies.runner import CONFIGS as CHECKOUT_CONFIGS
from lab.studies.runner import Variant

CONFIGS = CHECKOUT_CONFIGS / "detection"
# The study, in table order: each optimization row right after the control it is compared with.
STUDY_VARIANTS = (
    "softmax",
    "softmax_no_projections",
    "softmax_no_projections_encoder_self",
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
# encoder) -> softmax without projections at the encoder, which -> softmax (the missing matrices).
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
    "softmax_no_projections_encoder_self": "softmax",
    "mean": "softmax_no_projections_encoder_self",
}
COMPARED = "test/mAP"  # the metric of the "Δ vs control" column
DELTA_VS_CONTROL = paired.delta_title(COMPARED)
WHAT_DIFFERS = "what differs from the control"
PROJECTIONS = {True: "all", "no_qk": "no_qk", False: "none"}  # as detection_sites.md names them


def overlays(names: Sequence[str]) -> list[Variant]:
    """The variants ``configs/detection/<name>.yaml`` (``all``: ``STUDY_VARIANTS``), each once,
    in the order given; ValueError naming any without a file, and the names there are."""
    names = [n for name in names for n in (STUDY_VARIANTS if name == "all" else (name,))]
    missing = [n for n in names if not (CONFIGS / f"{n}.yaml").is_file()]
    if missing:
        there = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.yaml") if p.stem != "base"))
        raise ValueError(f"no config for {missing} under {CONFIGS}; allowed: all, {there}")
    return [Variant.from_config(CONFIGS / f"{n}.yaml") for n in dict.fromkeys(names)]


def site_specs_of(name: str) -> dict[str, dict[str, Any]]:
    """Variant ``name``'s ``{site: {name, projections, **options}}`` as ``DetectionTask``
    resolves them, read from its YAML stacked on ``base.yaml`` (no model is built)."""
    args: dict[str, Any] = {}
    for stem in ("base", name):
        text = (CONFIGS / f"{stem}.yaml").read_text()
        args.update((yaml.safe_load(text).get("model") or {}).get("init_args") or {})
    return site_specs(
        attention=args["attention"],
        projections=args["projections"],
        sites={site: args.get(site) for site in SITES},
        override=None,
    )


def difference(name: str, control: str) -> str:
    """What variant ``name`` changes from ``control``, site by site, e.g.
    ``decoder_cross: softmax → optimization`` or ``every site: projections all → no_qk``."""
    mine, theirs = site_specs_of(name), site_specs_of(control)
    changes: dict[str, list[str]] = {}
    for site in SITES:
        a, b = dict(mine[site]), dict(theirs[site])
        new, old = a.pop("projections"), b.pop("projections")
        what = []
        if a != b:
            what.append(f"{b['name']} → {a['name']}" if a["name"] != b["name"] else "options")
        if new != old:
            what.append(f"projections {PROJECTIONS[old]} → {PROJECTIONS[new]}")
        if what:
            changes.setdefault(", ".join(what), []).append(site)
    return "; ".join(
        f"{'every site' if len(sites) == len(SITES) else ' + '.join(sites)}: {what}"
        for what, sites in changes.items()
    )


def comparisons(results: Sequence[RunResult]) -> dict[str, dict[str, Any]]:
    """Per variant whose control also ran: ``{control, what differs, Δ test mAP vs control
    [95 % CI]}``, paired by seed (``results.paired.comparisons`` with ``CONTROLS``)."""
    rows = paired.comparisons(results, CONTROLS, COMPARED)
    for name, row in rows.items():
        row[WHAT_DIFFERS] = difference(name, CONTROLS[name])
        row[DELTA_VS_CONTROL] = row.pop(DELTA_VS_CONTROL)  # the Δ after what it measures
    return rows


# The paper puts optimization attention's best site in the decoder cross-attention, so the grid
# centres there unless told otherwise.
SENSITIVITY_DEFAULT = "optimization_decoder_cross"
# The values each option takes in the grid, in table order; the paper's point
# (λ 0.1, K 10, R 8: the optimization_* overlays) is in it.
GRID: dict[str, tuple[float | int, ...]] = {
    "lam": (0.03, 0.1, 0.3),
    "iterations": (5, 10, 20),
    "random_tokens": (0, 8),
}
# The ablation ladder (the ``ablation`` subcommand): the paper's form with one of its ingredients
# swapped at a time, first value the paper's. It asks which ingredient decides whether a site
# learns at all (the decoder cross-attention does not in the paper's form): the dictionary (values
# or keys), the power of the weights, their sign, normalised atoms, the random tokens, sparsity
# itself (λ = 0 makes every code the ridge solution (DmᵀDm + ρI)⁻¹Dmᵀq), and the Q/K projections the
# paper removes (a site-spec key: ``projections: true`` keeps all four).
ABLATIONS: dict[str, tuple[Any, ...]] = {
    "projections": ("no_qk", True),
    "dictionary": ("values", "keys"),
    "power": (5.0, 1.0),
    "signed": (False, True),
    "normalize": (False, True),
    "random_tokens": (8, 0),
    "lam": (0.1, 0.0),
}
Options = Mapping[str, tuple[Any, ...]]  # option -> the values a grid gives it
GRID_TITLES = {"lam": "λ", "iterations": "K", "random_tokens": "random tokens", "power": "p"}
DELTA_VS_REFERENCE = f"Δ {column(COMPARED).title} vs default [95 % CI]"
KEYS90 = "keys90"  # AttentionDiagnostics' attention/<layer>/keys90, if a record holds it
# A run converted from a committed table carries its point's keys90 cell as the page showed it
# in this tag: the per-layer values behind that cell were never committed.
KEYS90_CELL = "keys90_cell"


@dataclass
class GridPoint:
    """One point of a sensitivity grid: its variant (the site variant's overlay plus an override
    per optimization site) and the grid's option values at this point."""

    variant: Variant
    options: dict[str, Any]


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


def title(option: str) -> str:
    """An option's column title (``GRID_TITLES``, else the option's own name)."""
    return GRID_TITLES.get(option, option)


def _own_point(name: str, specs: Mapping[str, Mapping[str, Any]], grid: Options) -> dict[str, Any]:
    # An option a spec leaves out takes the backend's default (a site's projections: DETR's,
    # all four): that is what the run would use.
    defaults = {
        name: p.default
        for name, p in inspect.signature(OptimizationAttention.__init__).parameters.items()
    }
    defaults["projections"] = True
    point: dict[str, Any] = {}
    for option in grid:
        values = {site: spec.get(option, defaults[option]) for site, spec in specs.items()}
        if len(set(values.values())) > 1:
            raise ValueError(
                f"variant {name!r} sets {option} differently per site ({values}); a sensitivity "
                "grid needs one value of it to vary around"
            )
        point[option] = next(iter(values.values()))
    return point


def sensitivity_grid(
    site_variant: str = SENSITIVITY_DEFAULT, *, grid: Options = GRID
) -> list[GridPoint]:
    """The points of ``grid`` (``GRID``, or ``ABLATIONS``) around ``site_variant``'s own point,
    that point first, one option changed at a time. A point sets, for every optimization site,
    ``model.init_args.<site>=<its spec with the point's options>`` (the whole spec: a dict
    argument given again replaces, it does not merge). ValueError: ``site_variant`` has no
    optimization site (naming those that do), or its sites disagree on an option of ``grid``."""
    specs = optimization_sites(site_variant)
    if not specs:
        raise ValueError(
            f"no optimization attention site in a configs/detection overlay named "
            f"{site_variant!r}; allowed: {', '.join(sensitivity_sites())}"
        )
    own = _own_point(site_variant, specs, grid)
    points = [
        {**own, option: value}
        for option, values in grid.items()
        for value in values
        if value != own[option]
    ]
    chosen = []
    for options in [own, *(p for p in points if p != own)]:
        overrides = tuple(
            f"model.init_args.{site}={json.dumps({**spec, **options})}"
            for site, spec in specs.items()
        )
        # Named after the options that differ from the own point, which keeps the plain name.
        changed = [f"{o}={options[o]}" for o in options if options[o] != own[o]]
        name = f"{site_variant}@{','.join(changed)}" if changed else site_variant
        config = str(CONFIGS / f"{site_variant}.yaml")
        chosen.append(GridPoint(Variant(name, configs=(config,), overrides=overrides), options))
    return chosen


def _keys90(run: RunResult) -> float | None:
    # The mean over the layers that report it (only optimization layers have it).
    values = [
        v for k, v in run.metrics.items() if k.startswith("attention/") and k.endswith(f"/{KEYS90}")
    ]
    return statistics.fmean(values) if values else None


def _with_n(values: Sequence[float], *, scale: float = 1.0, digits: int) -> str | None:
    # ``mean ± std (n)``: a grid point's seeds may be fewer than asked for.
    if not values:
        return None
    return f"{format_mean_std(*mean_std(values), scale=scale, digits=digits)} ({len(values)})"


def sensitivity_cells(
    results: Sequence[RunResult], grid: Sequence[GridPoint]
) -> dict[str, dict[str, Any]]:
    """Per grid point: its λ, K, random tokens, the paired Δ test mAP vs the first point (the
    variant's own; ``reference`` there) and, if any run reports it, the mean keys90."""
    reference = grid[0].variant.name
    # Every other point is compared with the own point as the study compares with a control.
    vs_own = paired.comparisons(results, {p.variant.name: reference for p in grid[1:]}, COMPARED)
    has_keys90 = any(_keys90(r) is not None or KEYS90_CELL in r.info for r in results)
    cells: dict[str, dict[str, Any]] = {}
    for point in grid:
        name = point.variant.name
        row: dict[str, Any] = {title(o): v for o, v in point.options.items()}
        compared = vs_own.get(name, {}).get(DELTA_VS_CONTROL)
        row[DELTA_VS_REFERENCE] = "reference" if name == reference else compared
        if has_keys90:
            ok = [r for r in results if r.variant == name and r.status == "ok"]
            shown = {str(r.info[KEYS90_CELL]) for r in ok if KEYS90_CELL in r.info}
            # (n): converted runs carry no per-layer keys90, so n can be below the mAP's n.
            row[KEYS90] = _with_n([v for r in ok if (v := _keys90(r)) is not None], digits=2) or (
                shown.pop() if len(shown) == 1 else None
            )
        cells[name] = row
    return cells


def grid_table(
    results: Sequence[RunResult], grid: Sequence[GridPoint], cells: Mapping[str, Mapping[str, Any]]
) -> str:
    """The grid as a markdown table, a row per point: its ``cells`` and test mAP, AP50 and AP75
    mean ± std (n seeds) over its finished runs."""
    metrics = [column(k) for k in ("test/mAP", "test/AP50", "test/AP75")]
    titles = [*map(title, grid[0].options), *(c.title for c in metrics), DELTA_VS_REFERENCE]
    titles += [KEYS90] if any(KEYS90 in row for row in cells.values()) else []
    body = []
    for point in grid:
        name = point.variant.name
        row = dict(cells[name])
        for c in metrics:
            values = list(paired.per_seed(results, name, c.key).values())
            row[c.title] = _with_n(values, scale=c.scale, digits=c.digits)
        body.append([*("–" if row.get(t) is None else row[t] for t in titles), f"`{name}`"])
    return markdown_table([*titles, "variant"], body)
