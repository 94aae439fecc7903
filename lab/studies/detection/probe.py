"""What a trained DETR's decoder cross-attention looks at: statistics of its weights.

Why does optimization attention fail at the decoder cross-attention? Loss curves say *that* it
does not learn; this reads the trained checkpoints of study runs and measures, per decoder layer,
on validation images:

* ``mass on objects``: the mean share of a query's weight on feature cells whose centre lies
  inside a ground-truth box, beside ``cells in objects``, that share for uniform weights (chance);
* ``argmax spread``: per (head, query), how many different cells are its top cell over the
  images of a batch, as a fraction of the batch (1: a different cell in every image; a query
  that looks at the same place whatever the image scores 1/B);
* ``std across images``: the std over images of a query's weight on a cell (mean over heads,
  queries and cells), beside ``std across queries`` (over queries, same image);
* ``query overlap``: for two different queries of one image and head, Σ_cells min(w_a, w_b)
  (1: the same weights, 0: disjoint cells), averaged over the pairs — whether the object
  queries look at different places, which a set prediction needs.

A run's rows are kept beside its record as ``probe.csv`` (the ``detection_probe`` page kind,
``detection.report``, reads them there); a run without one is measured once: its record names
its experiment, and ``logs/<experiment>/<run>/`` its best checkpoint and the resolved
``config.yaml`` the model is rebuilt from by ``train.py``'s parser (any overlay or override is
honoured). A committed record has no checkpoint: its rows were measured where the run was.

Weights: ``OptimizationAttention.attention_weights``; any other backend attends over identity
values (``out = w @ I`` is ``w``; needs ``supports_any_value_dim``).
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
import yaml
from torch import Tensor, nn

from attn_lightning.attention.base import Attention
from attn_lightning.attention.optimization import OptimizationAttention
from attn_lightning.cli.checkpoints import load_checkpoint
from attn_lightning.models.multihead import MultiHeadAttention
from attn_lightning.records import read_csv, write_csv
from attn_lightning.records.run_files import load_record
from lab.results.records import run_folder
from lab.studies.runner import build_cli

STATS: tuple[str, ...] = ("mass on objects", "cells in objects", "argmax spread")
STATS += ("std across images", "std across queries", "query overlap")


def attention_weights(backend: Attention, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """A backend's weights ``(B, H, L, S)`` for one non-causal call (see the module doc)."""
    if isinstance(backend, OptimizationAttention):
        return backend.attention_weights(q, k, v)
    if not backend.supports_any_value_dim:
        raise ValueError(
            f"backend {backend.name!r} needs the value dim to be the head dim, so its weights "
            "cannot be read by attending over identity values"
        )
    s = k.shape[2]
    eye = torch.eye(s, dtype=q.dtype, device=q.device).expand(*k.shape[:2], s, s)
    return backend(q, k, eye, causal=False, key_padding_mask=None)


def object_cells(boxes: Tensor, side: int) -> Tensor:
    """``(side²,)`` bool: cells of a ``side×side`` grid whose centre lies in any box
    (``boxes: (M, 4)`` cx, cy, w, h in [0, 1]; row-major cells, as DETR flattens its map)."""
    centres = (torch.arange(side, dtype=torch.float32) + 0.5) / side
    cy, cx = (c.flatten() for c in torch.meshgrid(centres, centres, indexing="ij"))
    inside = torch.zeros(side * side, dtype=torch.bool)
    for x0, y0, w, h in boxes.tolist():
        inside |= ((cx - x0).abs() <= w / 2) & ((cy - y0).abs() <= h / 2)
    return inside


def layer_stats(weights: Tensor, targets: Sequence[dict[str, Any]]) -> dict[str, float]:
    """``STATS`` of one layer's weights ``(B, H, N, S)`` on a batch with its ``targets``.

    Signed weights (optimization's ``signed``) are read as magnitudes: a cell with weight −0.5
    is looked at as much as one with +0.5, only its value enters with the opposite sign.
    """
    weights = weights.abs()
    b, _, _, s = weights.shape
    side = round(s**0.5)
    if side * side != s:
        raise ValueError(f"{s} keys are not a square feature map")
    inside = torch.stack([object_cells(t["boxes"], side) for t in targets])  # (B, S)
    mass = (weights * inside[:, None, None, :]).sum(-1).mean()
    top = weights.argmax(-1)  # (B, H, N)
    spread = torch.tensor(
        [len(set(top[:, h, n].tolist())) for h in range(top.shape[1]) for n in range(top.shape[2])]
    )
    n = weights.shape[2]
    pairs = torch.minimum(weights[:, :, :, None, :], weights[:, :, None, :, :]).sum(-1)
    off_diagonal = ~torch.eye(n, dtype=torch.bool)  # (N, N): a query with itself is 1
    return {
        "mass on objects": mass.item(),
        "cells in objects": inside.float().mean().item(),
        "argmax spread": spread.float().mean().item() / b,
        "std across images": weights.std(0).mean().item(),
        "std across queries": weights.std(2).mean().item(),
        "query overlap": pairs[..., off_diagonal].mean().item(),
    }


def probed_run(experiment: str, variant: str, seed: int) -> tuple[Path, Path]:
    """A run's log folder and its best checkpoint; FileNotFoundError naming what is missing."""
    folder = Path("logs") / experiment / run_folder(variant, seed)
    try:
        record = load_record(folder)
    except (FileNotFoundError, ValueError) as error:
        raise FileNotFoundError(
            f"{error}: no probe.csv beside the committed record and no local run to measure; "
            "run the plan first, or name variants/seeds that ran"
        ) from None
    best = (record.get("best_checkpoint") or {}).get("path")
    if not best or not Path(best).is_file():
        raise FileNotFoundError(f"run {folder} has no best checkpoint file ({best})")
    return folder, Path(best)


def probe(experiment: str, variant: str, seed: int, *, batches: int) -> list[dict[str, Any]]:
    """One row per decoder layer: ``STATS`` averaged over ``batches`` validation batches of
    the run's best checkpoint."""
    folder, best = probed_run(experiment, variant, seed)
    # The run's resolved fit config, minus fit's own arguments (build_cli parses no subcommand).
    config = yaml.safe_load((folder / "config.yaml").read_text())
    for fit_only in ("ckpt_path", "weights_only"):
        config.pop(fit_only, None)
    with tempfile.TemporaryDirectory() as scratch:
        resolved = Path(scratch) / "config.yaml"
        resolved.write_text(yaml.safe_dump(config))
        cli = build_cli([resolved])
    model = cli.model
    model.load_state_dict(load_checkpoint(best)["state_dict"])
    model.eval()
    net: nn.Module = model.net
    backends = [
        cast(MultiHeadAttention, layer.cross_attn).backend
        for layer in cast(nn.ModuleList, net.decoder)
    ]
    captured: dict[int, tuple[Tensor, ...]] = {}
    hooks = [
        backend.register_forward_hook(lambda _m, args, _o, i=i: captured.__setitem__(i, args[:3]))
        for i, backend in enumerate(backends)
    ]
    per_layer: dict[int, list[dict[str, float]]] = {i: [] for i in range(len(backends))}
    cli.datamodule.setup("validate")
    try:
        for images, targets in itertools.islice(cli.datamodule.val_dataloader(), batches):
            with torch.no_grad():
                net(images)
                for i, (q, k, v) in captured.items():
                    weights = attention_weights(backends[i], q, k, v)
                    per_layer[i].append(layer_stats(weights, targets))
    finally:
        for hook in hooks:
            hook.remove()
    return [
        {
            "variant": variant,
            "seed": seed,
            "layer": i,
            "backend": backends[i].name,
            **{k: round(statistics.fmean(s[k] for s in stats), 4) for k in STATS},
        }
        for i, stats in per_layer.items()
    ]


# The columns of a probe.csv that are not floats.
WHOLE = ("seed", "layer")
TEXT = ("variant", "backend")


def run_rows(
    roots: Sequence[Path], variant: str, seed: int, *, batches: int
) -> list[dict[str, Any]]:
    """A run's rows: its ``probe.csv`` in the first of ``roots`` whose record folder has one,
    else measured (``probe``) and written there, beside the first record found.

    Raises:
        FileNotFoundError: no record of the run under ``roots``, or none measurable.
    """
    folders = [root / run_folder(variant, seed) for root in roots]
    for folder in folders:
        if (folder / "probe.csv").is_file():
            _, rows = read_csv(folder / "probe.csv")
            return [
                {k: int(v) if k in WHOLE else v if k in TEXT else float(v) for k, v in row.items()}
                for row in rows
            ]
    recorded = [folder for folder in folders if (folder / "record.json").is_file()]
    if not recorded:
        raise FileNotFoundError(
            f"no record of {variant} seed {seed} under {', '.join(map(str, roots))}"
        )
    experiment = str(load_record(recorded[0])["experiment"])
    torch.set_num_threads(1)
    rows = probe(experiment, variant, seed, batches=batches)
    write_csv(recorded[0] / "probe.csv", rows, {"batches": str(batches)}, float_digits=6)
    return rows
