"""The detection study's report kinds: what a plan's ``pages:`` section names (``plans.REPORTS``),
each ``(record folders, out, *, command, **the page's options)``, and what a variant costs.

* ``detection`` (``write_page``): the study's table (``results.tables.write_tables`` with the
  costs, the controls of ``detection.variants`` and a grid's own table) over ``variants`` ×
  ``seeds``, or with ``grid: sensitivity | ablation`` the grid around ``centre`` and its control;
  ``costs:`` a ``costs.json`` adds the cost columns (a variant it lacks is measured once, on
  this CPU, and added to it: a timing belongs to the machine that made it); ``family:``
  ``{variant: compared with}`` closes the page with the Holm table of every paired comparison
  on it, these pairs included (``multiplicity_rows``);
* ``detection_probe`` (``write_probe``): the decoder cross-attention statistics of trained runs
  (``detection.probe``), kept per run as ``probe.csv`` beside its record;
* ``detection_sites`` (``write_sites``): parameters and counted FLOPs per site of each variant's
  untrained model (``benchmarks.sites``): counts of the configs, no timing, so no machine line.

A variant's model is built from its config stack by ``train.py``'s own parser, untrained (cost
does not depend on the weights).
"""

from __future__ import annotations

import json
import logging
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attn_lightning.records import markdown_meta, markdown_records, write_csv
from lab.benchmarks import sites
from lab.results import paired
from lab.results.records import RunResult, runs_of
from lab.results.tables import append_curves, column, write_tables
from lab.studies.detection import probe
from lab.studies.detection.variants import (
    ABLATIONS,
    COMPARED,
    CONFIGS,
    CONTROLS,
    GRID,
    KEYS90,
    GridPoint,
    comparisons,
    grid_table,
    optimization_sites,
    overlays,
    sensitivity_cells,
    sensitivity_grid,
    title,
)
from lab.studies.runner import Variant, build_cli

METRICS = ("test/mAP", "test/AP50", "test/AP75", "val/mAP")
CURVE = "val/mAP"  # <out>_curves.csv: every validation of every run (results.tables)
log = logging.getLogger("lab.studies.detection")


def write(
    out: Path,
    results: list[RunResult],
    costs: dict[str, dict[str, Any]],
    *,
    command: str,
    jobs: int = 1,
    label: str = "variant",
    grid: Sequence[GridPoint] = (),
    heading: str = "",
    family: Mapping[str, str] | None = None,
) -> None:
    """The study's tables: ``METRICS`` mean ± std per variant, its cost columns and the
    comparison with its control where both ran (``CONTROLS``: the control, what differs, the
    paired-by-seed Δ); ``label`` titles the variant column. With a ``grid``, the summary also
    holds each point's cells and ``<out>.md`` opens with the grid's own table, headed
    ``heading`` (``_grid_head``); ``CURVE`` per run follows (``results.tables``). A ``family``
    (``{variant: what it is compared with}`` beyond the controls, possibly empty) closes the
    page with the multiplicity table of every comparison (``multiplicity_rows``)."""
    notes = []
    if costs:
        inputs = sorted({str(cost["input"]) for cost in costs.values()})
        notes.append(
            f"Cost columns: one CPU thread, input {', '.join(inputs)}, eval mode, no grad."
        )
    compared = comparisons(results)
    cells = sensitivity_cells(results, grid) if grid else {}
    extra: dict[str, dict[str, Any]] = {}
    for more in (costs, compared, cells):
        for variant, row in more.items():
            extra.setdefault(variant, {}).update((k, x) for k, x in row.items() if k != "input")
    # Every variant gets every column ("–" where it has none): the CSV needs one header.
    titles = list(dict.fromkeys(t for row in extra.values() for t in row))
    shown = dict.fromkeys(r.variant for r in results)
    extra = {v: {t: extra.get(v, {}).get(t) for t in titles} for v in shown}
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
        label=label,
        jobs=jobs,
        extra=extra,
        notes=notes,
    )
    if grid:
        md = out.with_name(out.name + ".md")
        md.write_text(_grid_head(results, grid, cells, heading) + md.read_text())
    append_curves(out, results, CURVE)
    if family is not None:
        _append_multiplicity(out, results, family)
    log.info("wrote %s.md and its CSVs", out)


def multiplicity_rows(
    results: Sequence[RunResult], more: Mapping[str, str]
) -> list[dict[str, Any]]:
    """The family of the page's paired comparisons: every ``CONTROLS`` pair both of whose runs
    are shown, then ``more`` (``{variant: what it is compared with}``), each with its mean Δ of
    ``COMPARED``, t-test p, Δ detectable at 80 % power and Holm threshold over the family, in
    ascending order of p (``results.paired``). Pairs sharing fewer than 2 seeds are left out."""
    shown, metric = {r.variant for r in results}, column(COMPARED)
    unknown = sorted({*more, *more.values()} - shown)
    if unknown:
        raise ValueError(f"family names {unknown}, not shown on the page; it has {sorted(shown)}")
    deltas: dict[str, list[float]] = {}
    for variant, control in [*CONTROLS.items(), *more.items()]:
        got = paired.seed_deltas(
            *(paired.per_seed(results, v, COMPARED) for v in (variant, control))
        )
        if {variant, control} <= shown and got is not None and got.n > 1:
            deltas[f"`{variant}` − `{control}`"] = list(got.deltas.values())
    p_values = {name: paired.t_test(values) for name, values in deltas.items()}

    def shown_as(value: float, sign: str = "") -> str:  # the main table's scale and decimals
        return f"{value * metric.scale:{sign}.{metric.digits}f}"

    return [
        {
            "comparison": name,
            "n": len(deltas[name]),
            f"mean Δ {metric.title}": shown_as(statistics.fmean(deltas[name]), "+"),
            "t p": paired.format_p(p_values[name]),
            "detectable Δ, 80 % power": shown_as(paired.detectable_effect(deltas[name])),
            "Holm threshold": f"{threshold:.4f}",
            "survives Holm": "yes" if survives else "no",
        }
        for name, (threshold, survives) in paired.holm(p_values).items()
    ]


def _append_multiplicity(out: Path, results: Sequence[RunResult], more: Mapping[str, str]) -> None:
    # Last on the page, under its own heading: the tables above keep their numbers (#table-N).
    rows = multiplicity_rows(results, more)
    path = write_csv(out.with_name(out.name + "_multiplicity.csv"), rows)
    text = (
        f"## Multiplicity\n\nThe page's {len(rows)} paired comparisons as one family "
        f"(`{path.name}`), in ascending order of p: each mean Δ, its two-sided t-test p (the "
        f"interval's own test, unadjusted) and {paired.DETECTABLE_NOTE} Holm's step-down over the "
        "family: the i-th p (from 0) of m is compared with 0.05 / (m − i), and the first over its "
        "threshold stops it, so every later comparison fails too (family-wise error ≤ 0.05 "
        "under any dependence).\n\n"
        f"{markdown_records(rows)}\n"
    )
    md = out.with_name(out.name + ".md")
    md.write_text(md.read_text().rstrip("\n") + "\n\n" + text)


def _grid_head(
    results: list[RunResult],
    grid: Sequence[GridPoint],
    cells: Mapping[str, Mapping[str, Any]],
    heading: str,
) -> str:
    # The grid (its options, test mAP mean ± std (n), AP50, AP75, the paired Δ vs the
    # variant's own point, keys90 where reported), then the page's summary and per-run tables.
    own = grid[0]
    point = ", ".join(f"{title(o)} = {v}" for o, v in own.options.items())
    notes = [
        f"Δ vs default: per seed, the point's {column(COMPARED).title} minus that of "
        f"`{own.variant.name}` ({point}) with the same seed; mean [95 % Student-t interval] "
        "(n seeds both finished; one seed: no interval)."
    ]
    if not any(KEYS90 in row for row in cells.values()):
        notes.append(
            f"No {KEYS90} column: the runs' records hold no attention/<layer>/{KEYS90} "
            "(AttentionDiagnostics logs it for optimization layers only)."
        )
    where = ", ".join(f"`{site}`" for site in optimization_sites(own.variant.name))
    head = [
        f"# {heading}: `{own.variant.name}` ({where})",
        "",
        grid_table(results, grid, cells),
        *(f"\n{note}" for note in notes),
        "",
        "## All columns and runs",
        "",
    ]
    return "\n".join(head) + "\n"


# A grid page's options and heading: ``grid: sensitivity`` or ``grid: ablation``.
GRIDS = {
    "sensitivity": (GRID, "Sensitivity of optimization attention"),
    "ablation": (
        ABLATIONS,
        "Ablation of optimization attention: one ingredient of the paper's form swapped at a time",
    ),
}


def grid_points(grid: str, centre: str) -> tuple[list[GridPoint], list[str]]:
    """The points of ``grid`` (``GRIDS``) around ``centre`` and the variants its table shows
    after them: an ablation's control at the same budget. ValueError naming what is allowed."""
    if grid not in GRIDS:
        raise ValueError(f"grid {grid!r}; allowed: {', '.join(GRIDS)}")
    points = sensitivity_grid(centre, grid=GRIDS[grid][0])
    return points, [CONTROLS[centre]] if grid == "ablation" and centre in CONTROLS else []


def write_page(
    runs: Sequence[Path],
    out: Path,
    *,
    command: str,
    seeds: Sequence[int],
    variants: Sequence[str] = (),
    grid: str | None = None,
    centre: str | None = None,
    label: str = "variant",
    costs: str | None = None,
    family: Mapping[str, str] | None = None,
) -> list[RunResult]:
    """The ``detection`` page kind (module docstring); returns its runs in table order."""
    names, heading = list(variants), ""
    points: list[GridPoint] = []
    if grid is not None:
        if centre is None:
            raise ValueError(f"a {grid} page needs centre: an optimization variant")
        points, control = grid_points(grid, centre)
        names, heading = [p.variant.name for p in points] + control, GRIDS[grid][1]
    if not names:
        raise ValueError("give variants: [...] or grid: sensitivity | ablation with a centre")
    results = runs_of(runs, [(name, seed) for name in names for seed in seeds])
    measured = {} if costs is None else _costs(Path(costs), names, command=command)
    write(
        out,
        results,
        measured,
        command=command,
        label=label,
        grid=points,
        heading=heading,
        family=family,
    )
    return results


def _costs(path: Path, names: Sequence[str], *, command: str) -> dict[str, dict[str, Any]]:
    # A timing belongs to the machine that made it: kept in the file, measured only when absent.
    kept = read_costs(path)
    missing = [name for name in names if name not in kept]
    if missing:
        torch.set_num_threads(1)
        new = {v.name: measure(v, overrides=(), batch=8, repeats=20) for v in overlays(missing)}
        write_costs(path, new, command=command)
        kept = read_costs(path)
    return {name: kept[name] for name in names}


def write_probe(
    runs: Sequence[Path],
    out: Path,
    *,
    command: str,
    variants: Sequence[str],
    seeds: Sequence[int],
    batches: int = 4,
) -> list[dict[str, Any]]:
    """The ``detection_probe`` page kind: ``<out>.md`` and ``<out>.csv`` of ``probe.STATS`` per
    decoder layer of each run; returns the rows. A run's rows are its ``probe.csv``, measured from
    its best checkpoint the first time (``probe.probe_run``). FileNotFoundError naming a run
    with neither."""
    if batches < 1:
        raise ValueError(f"batches must be >= 1, got {batches}")
    rows = [
        row
        for variant in variants
        for seed in seeds
        for row in probe.run_rows(runs, variant, seed, batches=batches)
    ]
    write_csv(out.with_name(out.name + ".csv"), rows, {"command": command}, float_digits=6)
    text = (
        "# Decoder cross-attention weights of trained DETR runs\n\n"
        f"```bash\n{command}\n```\n\n{markdown_records(rows)}\n\n"
        f"Validation split, {batches} batches, best checkpoint of each run. "
        "Definitions: `lab/studies/detection/probe.py`.\n"
    )
    out.with_name(out.name + ".md").write_text(text)
    return rows


def write_sites(runs: Sequence[Path], out: Path, *, command: str, variants: Sequence[str]) -> None:
    """The ``detection_sites`` page kind: ``<out>.md`` and ``<out>.csv`` per site, then per
    variant, of ``variants`` (names of ``configs/detection/``); ``runs`` is not read. Counts of
    the configs, not measurements: no date or machine, so the page rebuilds byte for byte."""
    del runs  # counted from the configs: no run is needed
    rows: list[sites.SiteRow] = []
    for variant in overlays(variants):  # one eval forward each, no timing
        model, size = build_model(variant)
        rows += sites.site_rows(variant.name, model, size)
    meta = {
        "command": command,
        "flops": "forward, one image, eval mode (no random tokens); counted as in "
        "lab.benchmarks.flops (matmuls 2·m·n·k + factorisations)",
        "tokens": "L, S recorded from one forward of a blank image of the config's size",
    }
    write_csv(out.with_name(out.name + ".csv"), rows, meta, float_digits=6)
    notes = {k: v for k, v in meta.items() if k != "command"}  # the command: a code block
    text = (
        "# Attention sites: parameters and FLOPs\n\nRegenerate with:\n\n"
        f"```bash\n{command}\n```\n\n{markdown_meta(notes)}\n\n"
        f"## Per site\n\n{sites.site_table(rows)}\n\n"
        f"## Per variant (all sites and layers, one image)\n\n{sites.variant_table(rows)}\n\n"
        "Attention params: the Q/K/V/out projections and any trainable backend tensors of the "
        "site's layers. FLOPs / attention call: the backend's forward on one image, all heads. "
        "Projection FLOPs: 2·n·E² per projection the site has (Q and out over the L queries, "
        "K and V over the S keys). Eval mode: in training, optimization's R random tokens "
        "join its dictionary (S' = S + R columns), which the other backends do not have.\n"
    )
    out.with_name(out.name + ".md").write_text(text)


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
    from attn_lightning.models.detr import attention_parameters
    from lab.benchmarks.measure import median_seconds, peak_bytes

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


def read_costs(path: Path) -> dict[str, dict[str, Any]]:
    """The measured costs per variant in ``path`` (``measure``'s dicts); {} without the file."""
    if not path.is_file():
        return {}
    variants: dict[str, dict[str, Any]] = json.loads(path.read_text())["variants"]
    return variants


def write_costs(path: Path, costs: Mapping[str, Mapping[str, Any]], *, command: str) -> None:
    """Add (or replace) ``costs`` per variant in ``path``, noting the measuring ``command``; the
    other variants' entries stay as they were measured."""
    doc: dict[str, Any] = (
        json.loads(path.read_text()) if path.is_file() else {"commands": [], "variants": {}}
    )
    doc["variants"].update({name: dict(cost) for name, cost in costs.items()})
    if command not in doc["commands"]:
        doc["commands"].append(command)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
