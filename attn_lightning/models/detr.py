"""DETR (Carion et al. 2020) with any attention backend, chosen per attention site.

Three sites, each configured on its own with ``{name, projections, **options}``:

* ``encoder_self``: image tokens attend to image tokens (q = k = x + pos, v = x);
* ``decoder_self``: object queries attend to each other (q = k = t + query_pos, v = t);
* ``decoder_cross``: object queries attend to the memory (q = t + query_pos, k = m + pos, v = m).

``projections`` per site: ``true`` (Q, K, V and out matrices), ``no_qk`` (V and out only: q and k
are the position-added inputs, the form of optimization-based attention) or ``false`` (none).
Positional encodings are added to q and k at every layer, never to v. The ``pool`` backend
(PoolFormer's local average) gets the feature map's h×w grid with every forward and is allowed
at ``encoder_self`` only: object queries have no spatial order to pool over.

The layers are the shared pre-norm ``EncoderBlock`` / ``DecoderBlock`` of ``models/transformer.py``
(LayerNorm before each sub-layer, one final norm per stack), which train more reliably than DETR's
post-norm default on short budgets; the decoder's final norm is applied to every layer's output
for the auxiliary losses, as in DETR.

Shape notation: ``B`` batch, ``S = h·w`` memory tokens, ``N`` object queries, ``E`` d_model,
``C`` classes (the class head has C + 1 outputs, the last one "no object").

Box formats, in one place: boxes inside the model, the matcher and the targets are ``cxcywh``
normalised to [0, 1] of the image; metrics and drawings want corners (``xyxy``) in pixels; COCO
files want ``xywh`` (corner + size) in pixels of the original image. Every conversion goes
through torchvision's ``box_convert``; the scaling to pixels is here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import Tensor, nn
from torchvision.ops import box_convert

from attn_lightning.models.backbone import build_backbone, sine_position_encoding
from attn_lightning.models.multihead import MultiHeadAttention, Projections, check_projections
from attn_lightning.models.specs import DetrSpec
from attn_lightning.models.transformer import DecoderBlock, EncoderBlock

SITES = ("encoder_self", "decoder_self", "decoder_cross")
DEFAULT_SITE: dict[str, Any] = {"name": "softmax", "projections": True}
# Backends that need the image grid, hence only make sense over the encoder's image tokens.
SPATIAL_BACKENDS = ("pool",)


def split_site(spec: Mapping[str, Any]) -> tuple[dict[str, Any], Projections]:
    """``{name, projections, **options}`` -> (backend dict ``{name, **options}``, projections).

    Raises:
        ValueError: no ``name``, or ``projections`` not true, false or ``no_qk``.
    """
    if not isinstance(spec, Mapping) or "name" not in spec:
        raise ValueError(f"an attention site needs a dict with a 'name' key, got {spec!r}")
    try:
        projections = check_projections(spec.get("projections", True))
    except ValueError as err:
        raise ValueError(f"site {err}") from None
    return {k: v for k, v in spec.items() if k != "projections"}, projections


class BoxMLP(nn.Sequential):
    """DETR's 3-layer box head: Linear → ReLU → Linear → ReLU → Linear(4)."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__(
            nn.Linear(d_model, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, 4),
        )


class DETR(nn.Module):
    """Backbone → 1×1 projection → encoder → decoder over N learned queries → class/box heads.

    Cost: backbone + O(L_enc·S²·E) encoder (for softmax) + O(L_dec·(N² + N·S)·E) decoder.

    Args:
        spec: the sizes: queries, transformer, backbone (``models.specs.DetrSpec``).
        num_classes: C, real classes (the class head predicts C + 1).
        sites: ``{encoder_self|decoder_self|decoder_cross: {name, projections, **options}}``;
            a site left out is softmax with projections; ``projections`` is true, false or
            ``no_qk``.

    Raises:
        ValueError: bad sizes, an unknown site, backend or option, or a spatial backend
            (``pool``) at a decoder site.
    """

    def __init__(
        self,
        spec: DetrSpec,
        *,
        num_classes: int,
        sites: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        super().__init__()
        d_model = spec.d_model
        if num_classes < 1:  # the spec's sizes were checked when it was made (check_sizes)
            raise ValueError(f"num_classes must be >= 1, got {num_classes}")
        sites = dict(sites or {})
        unknown = sorted(set(sites) - set(SITES))
        if unknown:
            raise ValueError(f"unknown attention site(s) {unknown}; allowed: {', '.join(SITES)}")
        self.sites = {site: dict(sites.get(site) or DEFAULT_SITE) for site in SITES}
        for site in ("decoder_self", "decoder_cross"):
            if self.sites[site].get("name") in SPATIAL_BACKENDS:
                raise ValueError(
                    f"attention {self.sites[site]['name']!r} at site {site!r}: it pools over the "
                    f"image grid, which only encoder_self has (object queries have no spatial "
                    f"order, and cross-attention has L != S); use it at encoder_self only"
                )
        self.num_classes = num_classes
        self.d_model = d_model
        self.backbone = build_backbone(
            spec.backbone, width=spec.backbone_width, num_stages=spec.backbone_stages
        )
        channels = cast(int, self.backbone.num_channels)  # set by every backbone
        self.input_proj = nn.Conv2d(channels, d_model, kernel_size=1)
        encoder_self, encoder_projections = split_site(self.sites["encoder_self"])
        decoder_self, decoder_projections = split_site(self.sites["decoder_self"])
        decoder_cross, cross_projections = split_site(self.sites["decoder_cross"])
        self.encoder = nn.ModuleList(
            EncoderBlock(spec, attention=encoder_self, projections=encoder_projections)
            for _ in range(spec.num_encoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model) if spec.num_encoder_layers else nn.Identity()
        self.decoder = nn.ModuleList(
            DecoderBlock(
                spec,
                attention=decoder_self,
                projections=decoder_projections,
                cross_attention=decoder_cross,
                cross_projections=cross_projections,
            )
            for _ in range(spec.num_decoder_layers)
        )
        self.decoder_norm = nn.LayerNorm(d_model)
        self.query_embed = nn.Embedding(spec.num_queries, d_model)
        self.class_head = nn.Linear(d_model, num_classes + 1)
        self.box_head = BoxMLP(d_model, d_model)

    def forward(self, images: Tensor) -> dict[str, Any]:
        """``images: (B, 3, H, W)`` -> dict:

        * ``pred_logits``: ``(B, N, C + 1)`` class logits of the last decoder layer;
        * ``pred_boxes``: ``(B, N, 4)`` boxes (cx, cy, w, h) in [0, 1] of the image size;
        * ``aux_outputs``: one ``{pred_logits, pred_boxes}`` per earlier decoder layer.
        """
        feats = self.input_proj(self.backbone(images))  # (B, E, h, w)
        b, _, h, w = feats.shape
        memory = feats.flatten(2).transpose(1, 2)  # (B, S, E)
        pos = sine_position_encoding(h, w, self.d_model, device=images.device)
        pos = pos.to(memory.dtype)[None]  # (1, S, E)
        for layer in self.encoder:
            # This batch's grid (image sizes may vary), for backends that pool over it.
            memory = layer(memory, pos=pos, grid=(h, w))  # (B, S, E)
        memory = self.encoder_norm(memory)
        query_pos = self.query_embed.weight[None].expand(b, -1, -1)  # (B, N, E)
        t = torch.zeros_like(query_pos)
        outputs = []
        for layer in self.decoder:
            t = layer(t, memory, pos=pos, query_pos=query_pos)
            outputs.append(self.decoder_norm(t))
        hs = torch.stack(outputs)  # (L_dec, B, N, E)
        logits = self.class_head(hs)  # (L_dec, B, N, C + 1)
        boxes = self.box_head(hs).sigmoid()  # (L_dec, B, N, 4)
        return {
            "pred_logits": logits[-1],
            "pred_boxes": boxes[-1],
            "aux_outputs": [
                {"pred_logits": a, "pred_boxes": c}
                for a, c in zip(logits[:-1], boxes[:-1], strict=True)
            ],
        }


def attention_parameters(model: nn.Module) -> int:
    """Parameters inside attention modules (projections and any trainable backend tensors)."""
    return sum(
        p.numel()
        for m in model.modules()
        if isinstance(m, MultiHeadAttention)
        for p in m.parameters()
    )


def cxcywh_to_xyxy(boxes: Tensor) -> Tensor:
    """``(…, 4)`` centre + size -> corners, in the same units."""
    return box_convert(boxes, in_fmt="cxcywh", out_fmt="xyxy")


def xyxy_to_cxcywh(boxes: Tensor) -> Tensor:
    """``(…, 4)`` corners -> centre + size, in the same units."""
    return box_convert(boxes, in_fmt="xyxy", out_fmt="cxcywh")


def xywh_to_cxcywh(boxes: Tensor) -> Tensor:
    """``(…, 4)`` COCO's corner + size -> centre + size, in the same units."""
    return box_convert(boxes, in_fmt="xywh", out_fmt="cxcywh")


def cxcywh_to_xywh(boxes: Tensor) -> Tensor:
    """``(…, 4)`` centre + size -> COCO's corner + size, in the same units."""
    return box_convert(boxes, in_fmt="cxcywh", out_fmt="xywh")


def pixel_scale(
    height: int | float, width: int | float, device: torch.device | None = None
) -> Tensor:
    """``[w, h, w, h]`` (float32): multiplies normalised boxes into pixels of an h×w image."""
    return torch.tensor([width, height, width, height], dtype=torch.float32, device=device)


def to_pixel_corners(boxes: Tensor, height: int, width: int) -> Tensor:
    """Normalised ``cxcywh`` boxes ``(…, 4)`` -> ``xyxy`` in pixels of an h×w image (float32)."""
    return cxcywh_to_xyxy(boxes.float()) * pixel_scale(height, width, boxes.device)


def to_coco_xywh(corners: Tensor, scale_x: float = 1.0, scale_y: float = 1.0) -> Tensor:
    """Pixel ``xyxy`` boxes ``(N, 4)`` -> COCO ``xywh``, rescaled by (scale_x, scale_y) (e.g.
    from the model's input size to the original image's)."""
    scale = torch.tensor([scale_x, scale_y, scale_x, scale_y], dtype=corners.dtype)
    return box_convert(corners * scale.to(corners.device), in_fmt="xyxy", out_fmt="xywh")
