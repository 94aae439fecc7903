"""The histogram baseline of image generation (``generation --histogram``).

Bits/dim of an independent per-pixel histogram fitted on the training split
(``data.pixels.histogram_bits_per_dim``), on all pixels and on the held-out completion pixels.
"""

from __future__ import annotations

import argparse

from attn_lightning.data.pixels import PixelDataModule, histogram_bits_per_dim
from attn_lightning.tasks.image import DEFAULT_OBSERVED_FRACTION


def histogram_report(args: argparse.Namespace) -> tuple[dict[str, float], str]:
    """Histogram bits/dim of ``args.split`` (fitted on train): all pixels and pixels i ≥ k.

    Returns:
        ``{"all": ..., "held_out": ...}`` and the line that states them with the data used.
    """
    data = PixelDataModule(
        source=args.source, image_size=args.image_size, levels=args.levels, root=args.root
    )
    data.setup("fit")
    train, evaluated = data.datasets["train"].pixels, data.datasets[args.split].pixels
    k = args.observed_pixels
    if k is None:  # ImageGenerationTask's default: the top round(0.38 · H) rows
        k = max(1, round(DEFAULT_OBSERVED_FRACTION * data.height)) * data.width
    result = {
        "all": histogram_bits_per_dim(train, evaluated, args.levels, smoothing=args.smoothing),
        "held_out": histogram_bits_per_dim(
            train, evaluated, args.levels, smoothing=args.smoothing, held_out_from=k
        ),
    }
    line = (
        f"{args.source} {data.height}x{data.width}, {args.levels} levels, per-pixel histogram "
        f"fitted on train ({len(train)} images, add-{args.smoothing} over the "
        f"{len(train.unique())} levels used), {args.split} split ({len(evaluated)} images): "
        f"{result['all']:.4f} bits/dim on all {data.seq_len} pixels, {result['held_out']:.4f} "
        f"on the held-out pixels i >= {k}"
    )
    return result, line
