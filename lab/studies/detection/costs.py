"""What a detection variant costs, measured on its untrained model, and the per-site table.

A variant's model is built from its config stack by ``train.py``'s own parser, untrained (cost
does not depend on the weights), and timed in this process on the CPU (``benchmarks.measure``);
``sites`` counts each site's parameters and forward FLOPs (``benchmarks.sites``) without timing.
Measured costs are kept in ``docs/results/detection_runs/costs.json`` beside the study's run
records: a timing belongs to the machine that made it, so a page rebuilt from records reads it
there (the ``detection`` page kind's ``costs:``, ``detection.report``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from attn_lightning.records import markdown_meta, write_csv
from lab.benchmarks import sites
from lab.studies.detection.variants import CONFIGS
from lab.studies.runner import Variant, build_cli


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


def site_costs(chosen: Sequence[Variant], *, overrides: Sequence[str] = ()) -> list[sites.SiteRow]:
    """Every variant's per-site rows (``benchmarks.sites``): one eval forward each, no timing."""
    rows: list[sites.SiteRow] = []
    for variant in chosen:
        model, size = build_model(variant, overrides=overrides)
        rows += sites.site_rows(variant.name, model, size)
    return rows


def write_sites(out: Path, rows: list[sites.SiteRow], *, command: str) -> None:
    """``<out>.md`` (per site, then per variant) and ``<out>.csv`` (per site). Counts of the
    configs, not measurements: no date or machine, so the page rebuilds byte for byte."""
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
