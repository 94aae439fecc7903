"""Sample and completion grids of an image-generation checkpoint, as PNG files (``samples``).

Writes ``<out>/<prefix>samples.png`` (unconditional samples) and ``<out>/<prefix>completions.png``
(rows: occluded | completions | original, the first ``--num-images`` images of ``--split``), the
same grids the ``ImageGrids`` callback logs to TensorBoard. The data are rebuilt from the
DataModule hyper-parameters saved in the checkpoint; ``--method`` picks the decoder (``step``:
recurrent / KV cache, ``recompute``: prefix recompute, ``auto``: step where possible).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from torchvision.utils import save_image

from attn_lightning.cli import checkpoints
from attn_lightning.data.image_grids import completion_grid, grid_generator, sample_grid
from attn_lightning.data.pixels import PixelDataModule
from attn_lightning.models.decoding import METHODS
from attn_lightning.tasks.image import ImageGenerationTask


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``samples`` subcommand's flags."""
    add = parser.add_argument
    add("--ckpt-path", "--ckpt_path", required=True, type=Path)
    add("--out", required=True, type=Path, help="folder for the PNG files")
    add("--prefix", default="", help="file name prefix, e.g. 'linear_'")
    add("--num-samples", "--num_samples", type=int, default=16)
    add("--num-images", "--num_images", type=int, default=6, help="images to complete")
    add("--num-completions", "--num_completions", type=int, default=3)
    add("--temperature", type=float, default=1.0)
    add("--seed", type=int, default=0)
    add("--split", default="test", choices=("train", "val", "test"))
    add("--method", default="auto", choices=METHODS)
    add("--device", default="cpu")


def samples(args: argparse.Namespace) -> list[Path]:
    """The ``samples`` subcommand: the checkpoint's grids under ``args.out``; their paths.

    Raises:
        ValueError: ``--ckpt-path`` is no checkpoint (``cli.checkpoints.CheckpointError``) or
            not an image model's.
    """
    task = checkpoints.load_task(args.ckpt_path, map_location=args.device)
    if not isinstance(task, ImageGenerationTask):
        kind = type(task).__name__
        raise ValueError(f"{args.ckpt_path}: a {kind} checkpoint, not an image model's")
    task.decode_method = args.method  # load_task's task is in eval mode
    saved = checkpoints.load_checkpoint(args.ckpt_path).get("datamodule_hyper_parameters", {})
    # LightningCLI adds "_class_path" / "_instantiator" entries: not constructor arguments.
    data = PixelDataModule(**{k: v for k, v in saved.items() if not k.startswith("_")})
    data.setup("test")
    pixels = data.datasets[args.split].pixels[: args.num_images].to(task.device)
    generator, temperature = grid_generator(args.seed), args.temperature
    grids = [
        sample_grid(task, args.num_samples, temperature=temperature, generator=generator),
        completion_grid(
            task,
            pixels,
            num_completions=args.num_completions,
            temperature=temperature,
            generator=generator,
        ),
    ]
    args.out.mkdir(parents=True, exist_ok=True)
    paths = [args.out / f"{args.prefix}{name}.png" for name in ("samples", "completions")]
    for grid, path in zip(grids, paths, strict=True):
        save_image(grid, path)
    return paths
