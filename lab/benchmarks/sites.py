"""Attention cost per site of a DETR model: parameters and counted forward FLOPs of each site.

DETR's three attention sites (``models.detr.SITES``): encoder self-attention (image tokens),
decoder self-attention (object queries) and decoder cross-attention (queries over the image
tokens). For a built model, ``site_rows`` reports per site the backend and its options, the
projections (``all`` = Q, K, V, out; ``no_qk`` = V, out; ``none``), the attention parameters of
one layer and of all its layers (projections and trainable backend tensors, as
``models.detr.attention_parameters``), and the forward FLOPs of one image: one backend call per
layer (``flops.attention_flops``, eval mode) and the layer's projections (2·n·E² each, biases
ignored). The token counts L and S are not computed from the config: one forward of an image of
the model's input size records the shapes (and the ``grid``) each backend receives, so they are
the backbone's feature grid as the model really has it.

The caller builds the model (``studies.detection`` builds each variant through ``train.py``'s
parser) and writes the tables (``site_table``, ``variant_table``, ``report.write_csv``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from attn_lightning.models.detr import DETR, SITES, split_site
from attn_lightning.models.multihead import MultiHeadAttention
from lab.benchmarks import report
from lab.benchmarks.flop_count import CallShape
from lab.benchmarks.flops import attention_flops

PROJECTION_LABELS = {True: "all", "no_qk": "no_qk", False: "none"}


@dataclass
class SiteRow:
    """One attention site of one model; FLOPs are per image (batch 1), eval mode."""

    variant: str
    site: str
    backend: str  # ``name:key=value,...`` as configured (defaults not repeated)
    projections: str  # all / no_qk / none
    layers: int
    heads: int
    head_dim: int
    queries: int  # L of one call
    keys: int  # S of one call
    params_per_layer: int
    params: int  # all layers of the site
    attention_flops: int | None  # one backend call (all heads); None: no formula
    projection_flops: int  # the projections of one layer
    flops: int | None  # all layers: layers × (attention + projections)


def _attention(block: nn.Module, name: str) -> MultiHeadAttention:
    found = getattr(block, name)
    if not isinstance(found, MultiHeadAttention):
        raise TypeError(f"{type(block).__name__}.{name} is not a MultiHeadAttention")
    return found


def site_modules(model: DETR) -> dict[str, list[MultiHeadAttention]]:
    """Site -> its ``MultiHeadAttention`` modules, one per layer (encoder / decoder blocks)."""
    return {
        "encoder_self": [_attention(block, "attn") for block in model.encoder],
        "decoder_self": [_attention(block, "self_attn") for block in model.decoder],
        "decoder_cross": [_attention(block, "cross_attn") for block in model.decoder],
    }


def _spec_label(backend: dict[str, Any]) -> str:
    options = ",".join(f"{k}={v}" for k, v in backend.items() if k != "name")
    return backend["name"] + (f":{options}" if options else "")


def _projection_flops(module: MultiHeadAttention, queries: int, keys: int) -> int:
    """2·n·in·out per projection: q and out over the L queries, k and v over the S keys."""
    total = 0
    for linear, tokens in (
        (module.q_proj, queries),
        (module.k_proj, keys),
        (module.v_proj, keys),
        (module.out_proj, queries),
    ):
        if linear is not None:
            total += 2 * tokens * linear.in_features * linear.out_features
    return total


Shapes = tuple[torch.Size, torch.Size, torch.Size]


def _record_calls(
    model: nn.Module, modules: list[MultiHeadAttention], images: Tensor
) -> dict[int, tuple[Shapes, tuple[int, int] | None]]:
    """id(module) -> the (q, k, v) shapes and the grid its backend got in one eval forward."""
    seen: dict[int, tuple[Shapes, tuple[int, int] | None]] = {}

    def hook_for(module: MultiHeadAttention) -> Any:
        def hook(_: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            q, k, v = args[:3]
            grid = kwargs.get("grid")
            seen[id(module)] = ((q.shape, k.shape, v.shape), None if grid is None else tuple(grid))

        return hook

    handles = [m.backend.register_forward_pre_hook(hook_for(m), with_kwargs=True) for m in modules]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(images)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    return seen


def site_rows(variant: str, model: nn.Module, image_size: int) -> list[SiteRow]:
    """The rows of ``model``'s three sites, from one eval forward of a blank
    ``image_size``×``image_size`` image.

    Raises:
        TypeError: ``model`` is not a ``DETR``.
        RuntimeError: a site's layers disagree on shapes or parameter counts (a DETR has one
            configuration per site, so this would be a bug in how the model was built).
    """
    if not isinstance(model, DETR):
        raise TypeError(f"attention sites are DETR's; got a {type(model).__name__}")
    sites = site_modules(model)
    all_modules = [m for modules in sites.values() for m in modules]
    device = next(model.parameters()).device
    images = torch.zeros(1, 3, image_size, image_size, device=device)
    calls = _record_calls(model, all_modules, images)
    rows = []
    for site in SITES:
        modules = sites[site]
        if not modules:  # num_encoder_layers = 0
            continue
        backend, projections = split_site(model.sites[site])
        first = modules[0]
        (q, k, v), grid = calls[id(first)]
        params = [sum(p.numel() for p in m.parameters()) for m in modules]
        if any(calls[id(m)] != ((q, k, v), grid) for m in modules) or len(set(params)) != 1:
            raise RuntimeError(f"{variant}: the layers of site {site!r} differ")
        shape = CallShape(q[0], q[1], q[2], k[2], q[3], v[3])
        count = attention_flops(backend["name"], shape, backend, grid=grid)
        per_call = None if count is None else count.total
        proj = _projection_flops(first, q[2], k[2])
        rows.append(
            SiteRow(
                variant=variant,
                site=site,
                backend=_spec_label(backend),
                projections=PROJECTION_LABELS[projections],
                layers=len(modules),
                heads=q[1],
                head_dim=q[3],
                queries=q[2],
                keys=k[2],
                params_per_layer=params[0],
                params=sum(params),
                attention_flops=per_call,
                projection_flops=proj,
                flops=None if per_call is None else len(modules) * (per_call + proj),
            )
        )
    return rows


def _int(value: int | None) -> str:
    return "n/a" if value is None else f"{value:,}"


def site_table(rows: list[SiteRow]) -> str:
    """Markdown: one row per (variant, site)."""
    header = [
        "variant",
        "site",
        "backend",
        "projections",
        "layers",
        "L × S",
        "attention params / layer",
        "attention params (site)",
        "FLOPs / attention call",
        "projection FLOPs / layer",
        "FLOPs (site, all layers)",
    ]
    body = [
        [
            f"`{r.variant}`",
            r.site,
            f"`{r.backend}`",
            r.projections,
            r.layers,
            f"{r.queries} × {r.keys}",
            _int(r.params_per_layer),
            _int(r.params),
            _int(r.attention_flops),
            _int(r.projection_flops),
            _int(r.flops),
        ]
        for r in rows
    ]
    return report.markdown_table(header, body)


def _by_variant(rows: list[SiteRow]) -> Iterator[tuple[str, list[SiteRow]]]:
    for variant in dict.fromkeys(r.variant for r in rows):
        yield variant, [r for r in rows if r.variant == variant]


def variant_table(rows: list[SiteRow]) -> str:
    """Markdown: per variant, the sums over its sites (attention params, FLOPs per image)."""
    body = []
    for variant, mine in _by_variant(rows):
        calls = [r.attention_flops for r in mine]
        attention = None if None in calls else sum(r.layers * (c or 0) for r, c in zip(mine, calls))
        projections = sum(r.layers * r.projection_flops for r in mine)
        body.append(
            [
                f"`{variant}`",
                _int(sum(r.params for r in mine)),
                _int(attention),
                _int(projections),
                _int(None if attention is None else attention + projections),
            ]
        )
    header = [
        "variant",
        "attention params",
        "backend FLOPs / image",
        "projection FLOPs / image",
        "attention FLOPs / image",
    ]
    return report.markdown_table(header, body)
