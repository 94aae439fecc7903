"""A small Vision Transformer classifier with any attention backend (Dosovitskiy et al. 2021).

``logits = W_head · mean_i LN(blocks(patch_embed(x) + P))_i``: non-overlapping p×p patches (p = 1
makes every pixel a token), positions added once to the tokens, the shared pre-norm
``TransformerEncoder`` of ``models/transformer.py`` run bidirectionally (no mask: every image has
the same h×w grid), mean pooling over the tokens and a linear head.

Mean pooling rather than a CLS token: a CLS token is an extra token with no place on the grid, so
backends that mix by position (``pool``, which needs L = h·w) could not take it, and a
sparse-code backend (``optimization``) would give it its own lasso; the mean works the same for
every backend.

Shape notation: ``B`` batch, ``C`` input channels, ``H×W`` image, ``p`` patch side,
``h×w = (H/p)×(W/p)`` the patch grid, ``N = h·w`` tokens, ``E`` d_model, ``K`` classes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn

from attn_lightning.models.positional import build_positional_encoding
from attn_lightning.models.specs import VitSpec
from attn_lightning.models.transformer import TransformerEncoder


class VisionTransformer(nn.Module):
    """Patch embedding + positions + encoder blocks + mean pooling + linear head.

    Cost: O(N·p²·C·E) embedding + O(layers · (backend(N) + N·E²)) encoder + O(E·K) head.

    Args:
        spec: the transformer's sizes and ``patch_size`` (``models.specs.VitSpec``); its
            ``positional`` is ``sinusoidal`` (1-D, over the patches in raster order) or
            ``learned``. Sinusoidal by default: with small patches a token says little by itself
            (p = 1: one grey value times a vector), so attention needs positions that tell tokens
            apart from the first step, which a learned table initialised at 0.02 takes hundreds
            of steps to learn.
        image_size: side H = W of the (square) input images; ``patch_size`` must divide it.
        num_classes: K.
        attention: backend dict, e.g. ``{"name": "optimization", "iterations": 10}``.
        in_channels: C (1 for grey images, which may also come as ``(B, H, W)``).

    Raises:
        ValueError: a size that is not positive, ``patch_size`` not dividing ``image_size``, an
            unknown positional encoding, or a bad transformer size, backend or option.
    """

    def __init__(
        self,
        spec: VitSpec,
        *,
        image_size: int,
        num_classes: int,
        attention: Mapping[str, Any],
        in_channels: int = 1,
    ) -> None:
        super().__init__()
        patch_size = spec.patch_size
        sizes = {
            "image_size": image_size,
            "patch_size": patch_size,
            "in_channels": in_channels,
            "num_classes": num_classes,
        }
        bad = {
            k: v
            for k, v in sizes.items()
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0
        }
        if bad:
            raise ValueError(f"sizes must be positive ints, got {bad}")
        if image_size % patch_size:
            raise ValueError(
                f"patch_size ({patch_size}) must divide image_size ({image_size}); allowed: "
                f"{[p for p in range(1, image_size + 1) if image_size % p == 0]}"
            )
        self.image_size = image_size
        self.patch_size = patch_size
        self.in_channels = in_channels
        self.grid = (image_size // patch_size, image_size // patch_size)  # (h, w)
        self.num_tokens = self.grid[0] * self.grid[1]
        # A stride-p convolution is the linear map of each flattened p×p×C patch to E (ViT).
        self.patch_embed = nn.Conv2d(
            in_channels, spec.d_model, kernel_size=patch_size, stride=patch_size
        )
        self.positional = build_positional_encoding(
            spec.positional, spec.d_model, max_len=self.num_tokens
        )
        self.dropout = nn.Dropout(spec.dropout)
        self.encoder = TransformerEncoder(
            spec,
            num_layers=spec.num_layers,
            attention=attention,
            projections=spec.projections,
            short_conv=spec.short_conv,
            rotary=spec.rotary,
        )
        self.head = nn.Linear(spec.d_model, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        """``images: (B, C, H, W)``, or ``(B, H, W)`` when C = 1 -> logits ``(B, K)``."""
        given = tuple(images.shape)
        if images.dim() == 3 and self.in_channels == 1:
            images = images[:, None]  # (B, 1, H, W)
        expected = (self.in_channels, self.image_size, self.image_size)
        if images.dim() != 4 or tuple(images.shape[1:]) != expected:
            raise ValueError(
                f"VisionTransformer expects images (B, {', '.join(map(str, expected))})"
                f"{' or (B, H, W)' if self.in_channels == 1 else ''}, got {given}; "
                f"set image_size (and in_channels) to the data's"
            )
        tokens = self.patch_embed(images).flatten(2).transpose(1, 2)  # (B, N, E), raster order
        x = self.dropout(self.positional(tokens))
        # Positional backends (pool) see only (B, H, N, D): the patch grid says where each lies.
        x = self.encoder(x, grid=self.grid)  # (B, N, E), final LayerNorm included
        return self.head(x.mean(dim=1))  # (B, K)


__all__ = ["VisionTransformer"]
