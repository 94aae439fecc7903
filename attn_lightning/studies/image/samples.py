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

import torch
from torchvision.utils import save_image

from attn_lightning.callbacks.images import completion_grid, grid_generator, sample_grid
from attn_lightning.cli import checkpoints
from attn_lightning.data.pixels import PixelDataModule
from attn_lightning.models.decoding import METHODS
from attn_lightning.tasks.image import ImageGenerationTask


def load_task(ckpt_path: str | Path, *, device: str = "cpu") -> tuple[ImageGenerationTask, dict]:
    """The task (eval mode) and the DataModule hyper-parameters saved with it."""
    task = checkpoints.load_task(ckpt_path, map_location=device)
    if not isinstance(task, ImageGenerationTask):
        raise ValueError(f"{ckpt_path}: a {type(task).__name__} checkpoint, not an image model's")
    saved = checkpoints.load_checkpoint(ckpt_path).get("datamodule_hyper_parameters", {})
    # LightningCLI adds "_class_path" / "_instantiator" entries: not constructor arguments.
    data_hparams = {k: v for k, v in saved.items() if not k.startswith("_")}
    return task.eval(), data_hparams


def write_grids(
    task: ImageGenerationTask,
    pixels: torch.Tensor,
    out: Path,
    *,
    prefix: str = "",
    num_samples: int = 16,
    num_completions: int = 3,
    temperature: float = 1.0,
    seed: int = 0,
) -> list[Path]:
    """Save ``<prefix>samples.png`` and ``<prefix>completions.png`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    generator = grid_generator(seed)
    samples = sample_grid(task, num_samples, temperature=temperature, generator=generator)
    completions = completion_grid(
        task,
        pixels.to(task.device),
        num_completions=num_completions,
        temperature=temperature,
        generator=generator,
    )
    paths = [out / f"{prefix}samples.png", out / f"{prefix}completions.png"]
    save_image(samples, paths[0])
    save_image(completions, paths[1])
    return paths


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
    """The ``samples`` subcommand: the checkpoint's grids under ``args.out``; their paths."""
    task, data_hparams = load_task(args.ckpt_path, device=args.device)
    task.decode_method = args.method
    data = PixelDataModule(**data_hparams)
    data.setup("test")
    pixels = data.datasets[args.split].pixels[: args.num_images]
    return write_grids(
        task,
        pixels,
        args.out,
        prefix=args.prefix,
        num_samples=args.num_samples,
        num_completions=args.num_completions,
        temperature=args.temperature,
        seed=args.seed,
    )
