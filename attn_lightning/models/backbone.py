"""DETR's image side: a convolutional backbone and the 2-D sine positional encoding.

Shape notation: ``B`` batch, ``C`` channels, ``H×W`` image, ``h×w`` feature map (stride s),
``E`` d_model, ``S = h·w`` memory tokens.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

BACKBONES = ("small_cnn", "resnet18")


class SmallCNN(nn.Sequential):
    """``num_stages`` × (3×3 conv stride 2 → BN → ReLU → 3×3 conv → BN → ReLU); stride 2^stages.

    A CPU-sized stand-in for ResNet: 64×64 images become an 8×8 map with 3 stages.
    """

    def __init__(self, *, in_channels: int = 3, width: int = 32, num_stages: int = 3) -> None:
        layers: list[nn.Module] = []
        channels = in_channels
        for stage in range(num_stages):
            out = width * 2 ** min(stage, 2)
            layers += [
                nn.Conv2d(channels, out, 3, stride=2, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
                nn.Conv2d(out, out, 3, padding=1, bias=False),
                nn.BatchNorm2d(out),
                nn.ReLU(inplace=True),
            ]
            channels = out
        super().__init__(*layers)
        self.num_channels = channels
        self.stride = 2**num_stages


class ResNet18Trunk(nn.Module):
    """torchvision ResNet-18 (random init, nothing downloaded) up to ``layer<num_stages>``.

    Stride 4·2^(num_stages−1): 4 for layer1 … 32 for layer4 (DETR's C5).
    """

    def __init__(self, *, num_stages: int = 4) -> None:
        super().__init__()
        from torchvision.models import resnet18

        net = resnet18(weights=None)
        stages = [net.layer1, net.layer2, net.layer3, net.layer4][:num_stages]
        self.body = nn.Sequential(net.conv1, net.bn1, net.relu, net.maxpool, *stages)
        self.num_channels = 64 * 2 ** (num_stages - 1)
        self.stride = 4 * 2 ** (num_stages - 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.body(x)


def build_backbone(name: str, *, width: int = 32, num_stages: int = 3) -> nn.Module:
    """``name`` in ``BACKBONES``; the module has ``num_channels`` and ``stride`` attributes.

    Raises:
        ValueError: unknown name or a stage count outside the backbone's range.
    """
    if name not in BACKBONES:
        raise ValueError(f"unknown backbone {name!r}; allowed: {', '.join(BACKBONES)}")
    if name == "resnet18":
        if num_stages not in (1, 2, 3, 4):
            raise ValueError(f"resnet18 num_stages must be 1..4, got {num_stages!r}")
        return ResNet18Trunk(num_stages=num_stages)
    if num_stages < 1 or width < 1:
        raise ValueError(
            f"small_cnn needs num_stages >= 1 and width >= 1, got {num_stages}, {width}"
        )
    return SmallCNN(width=width, num_stages=num_stages)


def sine_position_encoding(
    h: int, w: int, d_model: int, *, temperature: float = 10000.0, device=None
) -> Tensor:
    """DETR's ``PositionEmbeddingSine(normalize=True)``: ``(h·w, E)``, y half then x half.

    ``P[(i,j)] = [sin/cos((i+1)/h · 2π / T^{2k/(E/2)})]_k ‖ [same for (j+1)/w]``; O(h·w·E).
    Positions are normalised to (0, 2π] so the code does not depend on the map's size.
    """
    if d_model % 4:
        raise ValueError(f"d_model must be a multiple of 4 for 2-D sine encodings, got {d_model}")
    half = d_model // 2
    y = torch.arange(1, h + 1, dtype=torch.float32, device=device) / h * 2 * math.pi  # (h,)
    x = torch.arange(1, w + 1, dtype=torch.float32, device=device) / w * 2 * math.pi  # (w,)
    dim_t = torch.arange(half, dtype=torch.float32, device=device)
    dim_t = temperature ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / half)  # (E/2,)
    pos_y = y[:, None] / dim_t  # (h, E/2)
    pos_x = x[:, None] / dim_t  # (w, E/2)
    # Interleave sin on even and cos on odd channels, as DETR does.
    pos_y = torch.stack((pos_y[:, 0::2].sin(), pos_y[:, 1::2].cos()), dim=2).flatten(1)
    pos_x = torch.stack((pos_x[:, 0::2].sin(), pos_x[:, 1::2].cos()), dim=2).flatten(1)
    grid = torch.cat(
        (pos_y[:, None, :].expand(h, w, half), pos_x[None, :, :].expand(h, w, half)), dim=-1
    )  # (h, w, E)
    return grid.reshape(h * w, d_model)
