"""Sample and completion grids of an image-generation checkpoint, as PNG files (``write_grids``).

Writes ``<out>/<prefix>samples.png`` (unconditional samples) and ``<out>/<prefix>completions.png``
(rows: occluded | completions | original, the first ``num_images`` images of ``split``), the same
grids the ``ImageGrids`` callback logs to TensorBoard (``train.py predict`` writes one completion
per test image instead). The data are rebuilt from the DataModule hyper-parameters saved in the
checkpoint; ``method`` picks the decoder (``step``: recurrent / KV cache, ``recompute``: prefix
recompute, ``auto``: step where possible)::

    python -c "from lab.studies.image.samples import write_grids; write_grids(
        'checkpoints/image/<run>/last.ckpt', 'docs/results/figures', prefix='linear_')"
"""

from __future__ import annotations

from pathlib import Path

from torchvision.utils import save_image

from attn_lightning.cli import checkpoints
from attn_lightning.data.image_grids import completion_grid, grid_generator, sample_grid
from attn_lightning.data.pixels import PixelDataModule
from attn_lightning.models.decoding import METHODS
from attn_lightning.tasks.image import ImageGenerationTask

SPLITS = ("train", "val", "test")


def write_grids(
    ckpt_path: Path | str,
    out: Path | str,
    *,
    prefix: str = "",
    num_samples: int = 16,
    num_images: int = 6,
    num_completions: int = 3,
    temperature: float = 1.0,
    seed: int = 0,
    split: str = "test",
    method: str = "auto",
    device: str = "cpu",
) -> list[Path]:
    """The checkpoint's sample and completion grids under ``out``; their paths (module doc).

    Raises:
        ValueError: ``ckpt_path`` is no checkpoint (``cli.checkpoints.CheckpointError``) or not an
            image model's, or ``split`` / ``method`` is not one there is (naming those).
    """
    if split not in SPLITS or method not in METHODS:
        raise ValueError(f"split {split!r}, method {method!r}; splits {SPLITS}, methods {METHODS}")
    task = checkpoints.load_task(ckpt_path, map_location=device)
    if not isinstance(task, ImageGenerationTask):
        kind = type(task).__name__
        raise ValueError(f"{ckpt_path}: a {kind} checkpoint, not an image model's")
    task.decode_method = method  # load_task's task is in eval mode
    saved = checkpoints.load_checkpoint(ckpt_path).get("datamodule_hyper_parameters", {})
    # LightningCLI adds "_class_path" / "_instantiator" entries: not constructor arguments.
    data = PixelDataModule(**{k: v for k, v in saved.items() if not k.startswith("_")})
    data.setup("test")
    pixels = data.datasets[split].pixels[:num_images].to(task.device)
    generator = grid_generator(seed)
    grids = [
        sample_grid(task, num_samples, temperature=temperature, generator=generator),
        completion_grid(
            task,
            pixels,
            num_completions=num_completions,
            temperature=temperature,
            generator=generator,
        ),
    ]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{prefix}{name}.png" for name in ("samples", "completions")]
    for grid, path in zip(grids, paths, strict=True):
        save_image(grid, path)
    return paths
