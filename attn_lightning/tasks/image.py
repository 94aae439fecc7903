"""Autoregressive image generation and occluded completion ("Transformers are RNNs", §4.2).

A causal pixel transformer (``models/pixel.py``) over pixels in raster order, trained by
maximum likelihood. Metrics per split (``train/``, ``val/``, ``test/``):

* ``loss`` = ``bits_per_dim``: ``−mean_i log₂ p(x_i | x_<i)`` over all pixels (the paper's metric);
* ``completion_bpd``: the same over the held-out pixels ``i ≥ k`` only, i.e.
  ``−log₂ p(x_{k:} | x_{<k}) / (N − k)``: how well the model completes an image whose first k
  pixels (the top rows) are observed. Exact for an autoregressive model, no sampling involved.

Sampling (unconditional, and completion of the first k pixels) is ``sample_pixels``: recurrent
``step`` where every backend has it, else prefix recompute; the ``ImageGrids`` callback
(``attn_lightning.callbacks.samples``) logs both as image grids each validation epoch, and
``lab.studies.image.samples.write_grids`` writes them as PNG from a checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torchvision.utils import save_image

from attn_lightning.attention import resolve_attention
from attn_lightning.data.image_grids import draw_completions, draw_samples, grid_generator
from attn_lightning.models.pixel import PixelTransformer, bits_per_dim, sample_pixels
from attn_lightning.models.specs import PixelSpec
from attn_lightning.tasks.base import (
    AttentionTask,
    require_causal,
    require_from_data,
)

DEFAULT_OBSERVED_FRACTION = 0.38  # the paper observes 300 of 784 pixels (38%)


class ImageGenerationTask(AttentionTask):
    """Pixel-by-pixel image model with any causal attention backend.

    Args:
        net: the model's sizes and output distribution (``models.specs.PixelSpec``: d_model,
            num_heads, num_layers, d_ff, dropout, positional, projections, output —
            ``categorical`` or ``logistic_mixture`` of ``num_mixtures`` logistics).
        attention: backend dict, e.g. ``{name: linear}``; default softmax.
        attention_override: keys replacing ``attention``'s at build time, not saved as a
            hyper-parameter (see ``attn_lightning.tasks.base``).
        image_size: H = W; linked from the DataModule by the CLI.
        levels: pixel values; linked from the DataModule by the CLI.
        observed_pixels: k, pixels given to completion; None = the top
            ``round(0.38 · H)`` rows (3 of 8, 11 of 28; the paper gives 300 of 784).
        lr, weight_decay, warmup_steps, min_lr_ratio: AdamW and its warm-up + cosine schedule.
        decode_method: ``auto`` (step if every backend has it), ``step`` or ``recompute``.
    """

    hp_metrics = ("hp/val_bits_per_dim", "hp/val_completion_bpd")
    net_spec = PixelSpec

    def __init__(
        self,
        *,
        image_size: int = 8,
        levels: int = 256,
        net: PixelSpec = PixelSpec(),
        attention: dict[str, Any] | None = None,
        attention_override: dict[str, Any] | None = None,
        observed_pixels: int | None = None,
        lr: float = 1e-3,
        weight_decay: float = 0.01,
        warmup_steps: int = 100,
        min_lr_ratio: float = 0.1,
        decode_method: str = "auto",
    ) -> None:
        super().__init__()
        require_from_data(self, image_size=image_size, levels=levels)
        if not isinstance(image_size, int) or image_size <= 0:
            raise ValueError(f"image_size must be a positive int, got {image_size!r}")
        seq_len = image_size * image_size
        if observed_pixels is None:
            observed_pixels = max(1, round(DEFAULT_OBSERVED_FRACTION * image_size)) * image_size
        if not 0 <= observed_pixels < seq_len:
            raise ValueError(
                f"observed_pixels must be in [0, {seq_len}) for {image_size}x{image_size} "
                f"images, got {observed_pixels!r}"
            )
        spec = self.init_task(net, attention_override=attention_override)
        self.image_size = image_size
        self.levels = levels
        self.observed_pixels = observed_pixels
        self.decode_method = decode_method
        self.attention_config = resolve_attention(attention, attention_override)
        self.net = PixelTransformer(
            spec, levels=levels, seq_len=seq_len, attention=self.attention_config
        )
        require_causal(self.net, why="pixels need")

    # ------------------------------------------------------------------ model
    def forward(self, pixels: Tensor) -> Tensor:
        """``log p(x_i | x_<i)`` in nats, ``(B, N)``."""
        return self.net.log_likelihood(pixels)

    @torch.no_grad()
    def sample(
        self,
        num_images: int,
        *,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Unconditional samples ``(num_images, N)``."""
        observed = torch.empty(num_images, 0, dtype=torch.long, device=self.device)
        return sample_pixels(
            self.net,
            observed=observed,
            temperature=temperature,
            generator=generator,
            method=self.decode_method,
        )

    @torch.no_grad()
    def complete(
        self,
        pixels: Tensor,
        *,
        num_completions: int = 1,
        temperature: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> Tensor:
        """Keep the first ``observed_pixels`` of ``pixels: (B, N)``, sample the rest
        ``num_completions`` times -> ``(B, num_completions, N)``."""
        observed = pixels[:, : self.observed_pixels].repeat_interleave(num_completions, dim=0)
        full = sample_pixels(
            self.net,
            observed=observed,
            temperature=temperature,
            generator=generator,
            method=self.decode_method,
        )
        return full.view(pixels.shape[0], num_completions, -1)

    # ------------------------------------------------------------------ steps
    def _shared_step(self, batch: dict[str, Tensor], split: str) -> Tensor:
        log_lik = self(batch["pixels"])  # (B, N) nats
        loss = bits_per_dim(log_lik)
        completion = bits_per_dim(log_lik[:, self.observed_pixels :])
        size = log_lik.shape[0]
        self.log_mean(f"{split}/loss", loss, batch_size=size, prog_bar=True)
        self.log_mean(f"{split}/bits_per_dim", loss, batch_size=size)
        self.log_mean(f"{split}/completion_bpd", completion, batch_size=size)
        if split == "val":  # the same values under hp/ names, for the hparams tab
            self.log_mean("hp/val_bits_per_dim", loss, batch_size=size)
            self.log_mean("hp/val_completion_bpd", completion, batch_size=size)
        return loss

    def training_step(self, batch: dict[str, Tensor], batch_idx: int) -> Tensor:
        return self._shared_step(batch, "train")

    def validation_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._shared_step(batch, "val")

    def test_step(self, batch: dict[str, Tensor], batch_idx: int) -> None:
        self._shared_step(batch, "test")

    def predict_step(self, batch: dict[str, Tensor], batch_idx: int) -> dict[str, Tensor]:
        """One completion per image of the batch: ``{"pixels", "completion"}``, each ``(B, N)``."""
        completion = self.complete(batch["pixels"], num_completions=1)[:, 0]
        return {"pixels": batch["pixels"], "completion": completion}

    def save_predictions(
        self,
        predictions: list[dict[str, Tensor]],
        indices: list[int],
        folder: Path,
        *,
        num_samples: int = 16,
        grid_images: int = 16,
        seed: int = 0,
    ) -> list[Path]:
        """Write the completions of ``predict_step`` and fresh unconditional samples.

        * ``completions.pt``: ``{"index": (M,), "pixels": (M, N), "completion": (M, N),
          "observed_pixels", "image_size", "levels"}`` (tokens in raster order);
        * ``completions.png``: the first ``grid_images`` rows, occluded | completion | original;
        * ``samples.pt`` (``{"samples": (S, N), "seed"}``) and ``samples.png``: ``num_samples``
          unconditional samples drawn here from a generator seeded with ``seed``.
        """
        folder = Path(folder)
        pixels = torch.stack([p["pixels"] for p in predictions]).cpu()  # (M, N)
        completion = torch.stack([p["completion"] for p in predictions]).cpu()  # (M, N)
        samples = self.sample(num_samples, generator=grid_generator(seed)).cpu()  # (S, N)
        sizes = {
            "observed_pixels": self.observed_pixels,
            "image_size": self.image_size,
            "levels": self.levels,
        }
        paths = [folder / name for name in ("completions.pt", "completions.png")]
        paths += [folder / name for name in ("samples.pt", "samples.png")]
        torch.save(
            {"index": torch.tensor(indices), "pixels": pixels, "completion": completion, **sizes},
            paths[0],
        )
        shown = slice(0, grid_images)
        save_image(draw_completions(self, pixels[shown], completion[shown, None]), paths[1])
        torch.save({"samples": samples, "seed": seed, **sizes}, paths[2])
        save_image(draw_samples(self, samples), paths[3])
        return paths
