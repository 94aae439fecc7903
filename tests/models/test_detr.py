"""DETR model: outputs, per-site attention and projections, positional encodings, backbones; and
its box formats: every conversion between the normalised cxcywh and the pixel formats."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.models.backbone import build_backbone, sine_position_encoding
from attn_lightning.models.detr import (
    DETR,
    SITES,
    attention_parameters,
    cxcywh_to_xywh,
    cxcywh_to_xyxy,
    pixel_scale,
    split_site,
    to_coco_xywh,
    to_pixel_corners,
    xywh_to_cxcywh,
    xyxy_to_cxcywh,
)
from attn_lightning.models.specs import DetrSpec, spec_fields

E, H = 32, 4
OPT = {"name": "optimization", "projections": False, "iterations": 3}
PAPER = {"name": "optimization", "projections": "no_qk", "iterations": 3}
POOL = {"name": "pool", "projections": "no_qk"}


def tiny(**kwargs) -> DETR:
    torch.manual_seed(0)
    options = {
        "num_classes": 3,
        "num_queries": 6,
        "d_model": E,
        "num_heads": H,
        "d_ff": 64,
        "backbone_width": 8,
        "num_encoder_layers": 2,
        "num_decoder_layers": 3,
    }
    merged = {**options, **kwargs}
    spec = DetrSpec(**{k: merged.pop(k) for k in list(merged) if k in spec_fields(DetrSpec)})
    return DETR(spec, **merged)


def test_outputs_shapes_ranges_and_aux_layers():
    model = tiny()
    out = model(torch.rand(2, 3, 32, 32))
    assert out["pred_logits"].shape == (2, 6, 4)
    assert out["pred_boxes"].shape == (2, 6, 4)
    assert ((out["pred_boxes"] > 0) & (out["pred_boxes"] < 1)).all()
    assert len(out["aux_outputs"]) == 2  # one per earlier decoder layer
    assert all(a["pred_boxes"].shape == (2, 6, 4) for a in out["aux_outputs"])


@pytest.mark.parametrize(
    "sites",
    [
        {},
        {site: OPT for site in SITES},
        {"encoder_self": {**OPT, "exclude_self": True}},
        {"decoder_cross": OPT},
        {"encoder_self": {"name": "mean", "projections": False}},
        {site: PAPER for site in SITES},
        {"encoder_self": {**PAPER, "dictionary": "keys", "exclude_self": True}},
        {"encoder_self": POOL},
    ],
    ids=[
        "softmax",
        "optimization_all",
        "opt_encoder",
        "opt_cross",
        "mean_encoder",
        "paper_all",
        "paper_keys_encoder",
        "pool_encoder",
    ],
)
def test_every_site_configuration_trains(sites):
    model = tiny(sites=sites)
    out = model(torch.rand(2, 3, 32, 32))
    loss = out["pred_logits"].square().mean() + out["pred_boxes"].sum()
    loss += sum(a["pred_boxes"].sum() for a in out["aux_outputs"])
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


def test_site_backends_and_attention_parameter_count():
    model = tiny(sites={"decoder_cross": OPT})
    per_mha = 4 * (E * E + E)  # q, k, v, out projections with biases
    # 2 encoder self + 3 decoder self with projections; 3 decoder cross without.
    assert attention_parameters(model) == 5 * per_mha
    for layer in model.decoder:
        assert layer.cross_attn.backend.name == "optimization"
        assert layer.cross_attn.q_proj is None
        assert layer.self_attn.backend.name == "softmax" and layer.self_attn.q_proj is not None
    free = tiny(sites={site: OPT for site in SITES})
    assert attention_parameters(free) == 0
    # The paper's form keeps V and out: half the projection parameters at every site.
    paper = tiny(sites={site: PAPER for site in SITES})
    assert attention_parameters(paper) == 8 * 2 * (E * E + E)
    assert paper.decoder[0].cross_attn.k_proj is None


def test_positions_are_added_to_queries_and_keys_not_values():
    model = tiny(sites={"encoder_self": {"name": "softmax", "projections": False}})
    seen = {}
    layer = model.encoder[0]
    layer.attn.register_forward_hook(
        lambda mod, args, out: seen.update(q=args[0], k=args[1], v=args[2])
    )
    model(torch.rand(1, 3, 32, 32))
    pos = sine_position_encoding(4, 4, E)  # a 32×32 image is a 4×4 map at stride 8
    torch.testing.assert_close(seen["q"] - seen["v"], pos[None].expand_as(seen["v"]))
    torch.testing.assert_close(seen["k"], seen["q"])


def test_sine_position_encoding_matches_detr_formula():
    h, w, d = 3, 5, 16
    got = sine_position_encoding(h, w, d)
    half = d // 2
    ref = torch.zeros(h, w, d, dtype=torch.float64)
    for i in range(h):
        for j in range(w):
            for k in range(half):
                t = 10000 ** (2 * (k // 2) / half)
                y, x = (i + 1) / h * 2 * math.pi / t, (j + 1) / w * 2 * math.pi / t
                ref[i, j, k] = math.sin(y) if k % 2 == 0 else math.cos(y)
                ref[i, j, half + k] = math.sin(x) if k % 2 == 0 else math.cos(x)
    torch.testing.assert_close(got, ref.view(h * w, d).float(), rtol=1e-5, atol=1e-6)


def test_resnet18_backbone_is_random_init_and_runs():
    net = build_backbone("resnet18", num_stages=2)
    assert net.num_channels == 128 and net.stride == 8
    assert net(torch.rand(1, 3, 32, 32)).shape == (1, 128, 4, 4)
    model = tiny(backbone="resnet18", backbone_stages=2)
    assert model(torch.rand(1, 3, 32, 32))["pred_boxes"].shape == (1, 6, 4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"sites": {"encoder": OPT}}, r"unknown attention site\(s\) \['encoder'\]; allowed"),
        ({"sites": {"encoder_self": {"projections": False}}}, "needs a dict with a 'name'"),
        ({"sites": {"encoder_self": {"name": "softmax", "projections": "no"}}}, "true or false"),
        (
            {"sites": {"encoder_self": {"name": "softmax", "projections": "no"}}},
            r"or 'no_qk' \(V and out only, no Q and K\), got 'no'",
        ),
        ({"sites": {"decoder_cross": POOL}}, "'pool' at site 'decoder_cross'.*encoder_self only"),
        ({"sites": {"decoder_self": POOL}}, "'pool' at site 'decoder_self'"),
        ({"sites": {"decoder_self": {"name": "softmx"}}}, "unknown attention 'softmx'"),
        ({"backbone": "vgg"}, "unknown backbone 'vgg'; allowed: small_cnn, resnet18"),
        ({"num_decoder_layers": 0}, "num_decoder_layers must be >= 1"),
        ({"d_model": 30, "num_heads": 3}, "multiple of 4"),
    ],
)
def test_bad_configuration_fails_clearly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny(**kwargs)(torch.rand(1, 3, 32, 32))


def test_split_site_defaults_to_projections():
    assert split_site({"name": "softmax"}) == ({"name": "softmax"}, True)
    assert split_site(OPT) == ({"name": "optimization", "iterations": 3}, False)
    assert split_site(PAPER) == ({"name": "optimization", "iterations": 3}, "no_qk")


def test_pool_gets_the_feature_map_grid_of_each_batch():
    model = tiny(sites={"encoder_self": POOL})
    backends = [layer.attn.backend for layer in model.encoder]
    assert all(b.name == "pool" for b in backends)
    grids = []
    for backend in backends:
        backend.register_forward_pre_hook(
            lambda _, args, kwargs: grids.append(kwargs["grid"]), with_kwargs=True
        )
    model(torch.rand(1, 3, 32, 32))
    assert grids == [(4, 4)] * 2  # stride 8, both encoder layers
    model(torch.rand(1, 3, 48, 32))
    assert grids[2:] == [(6, 4)] * 2  # this batch's grid, not the first one's
    assert not any(hasattr(b, "spatial_shape") for b in backends)  # nothing kept between calls


def test_pool_output_follows_the_grid_it_is_passed():
    # A 1-D window over the raster order would give other boxes: the 2-D grid reaches pool.
    model = tiny(sites={"encoder_self": POOL}).eval()
    images = torch.rand(1, 3, 48, 32)
    boxes = model(images)["pred_boxes"]
    calls = []

    def one_d(module, args, kwargs):
        calls.append(kwargs["grid"])
        return args, {**kwargs, "grid": None}

    for layer in model.encoder:
        layer.attn.backend.register_forward_pre_hook(one_d, with_kwargs=True)
    assert not torch.allclose(model(images)["pred_boxes"], boxes)
    assert calls == [(6, 4)] * 2


def test_mean_pooling_everywhere_makes_all_queries_equal():
    # Why the mean baseline is not used in the decoder: q (where the query embeddings enter) is
    # ignored, so every object query gets the same output.
    model = tiny(sites={site: {"name": "mean", "projections": False} for site in SITES})
    boxes = model(torch.rand(1, 3, 32, 32))["pred_boxes"][0]
    torch.testing.assert_close(boxes, boxes[:1].expand_as(boxes))


def test_no_encoder_ablation():
    model = tiny(num_encoder_layers=0)
    assert model(torch.rand(1, 3, 32, 32))["pred_logits"].shape == (1, 6, 4)


@pytest.mark.parametrize(
    "spec",
    [{**PAPER, "random_tokens": 0}, {**PAPER, "projections": True, "dictionary": "keys"}],
    ids=["paper_values", "keys_all_projections"],
)
def test_gradients_through_optimization_cross_attention_match_finite_differences(spec):
    """The whole DETR in float64 with optimization attention at the decoder cross-attention
    (L = 6 queries ≠ S = 16 image tokens; eval form, no random tokens): autograd's gradient of
    the outputs w.r.t. the object queries and the V projection equals central differences. This
    rules out the integration, not only the backend, as a cause of that site not learning."""
    model = tiny(sites={"decoder_cross": spec}, num_decoder_layers=2).double().eval()
    images = torch.rand(
        2, 3, 32, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
    )
    g = torch.Generator().manual_seed(2)
    out = model(images)
    weights = [
        torch.randn(out[k].shape, generator=g, dtype=torch.float64)
        for k in ("pred_logits", "pred_boxes")
    ]

    def loss() -> torch.Tensor:
        o = model(images)
        return (o["pred_logits"] * weights[0]).sum() + (o["pred_boxes"] * weights[1]).sum()

    params = dict(model.named_parameters())
    loss().backward()
    for name in ("query_embed.weight", "decoder.0.cross_attn.v_proj.weight"):
        flat = params[name].data.view(-1)
        for index in torch.randperm(flat.numel(), generator=g)[:4].tolist():
            old = flat[index].item()
            flat[index] = old + 1e-6
            up = loss().item()
            flat[index] = old - 1e-6
            down = loss().item()
            flat[index] = old
            numeric = (up - down) / 2e-6
            analytic = params[name].grad.view(-1)[index].item()
            assert analytic == pytest.approx(numeric, rel=1e-4, abs=1e-7), (name, index)


def test_conversions_by_hand():
    box = torch.tensor([[0.5, 0.25, 0.2, 0.1]])  # cx, cy, w, h
    torch.testing.assert_close(cxcywh_to_xyxy(box), torch.tensor([[0.4, 0.2, 0.6, 0.3]]))
    torch.testing.assert_close(cxcywh_to_xywh(box), torch.tensor([[0.4, 0.2, 0.2, 0.1]]))
    torch.testing.assert_close(xyxy_to_cxcywh(cxcywh_to_xyxy(box)), box)
    torch.testing.assert_close(xywh_to_cxcywh(cxcywh_to_xywh(box)), box)


def test_pixels_are_width_for_x_and_height_for_y():
    assert pixel_scale(48, 96).tolist() == [96.0, 48.0, 96.0, 48.0]
    box = torch.tensor([[0.5, 0.5, 0.5, 0.25]], dtype=torch.float64)
    corners = to_pixel_corners(box, 48, 96)
    assert corners.dtype == torch.float32
    assert corners.tolist() == [[24.0, 18.0, 72.0, 30.0]]


def test_coco_boxes_rescale_to_the_original_image():
    corners = torch.tensor([[4.0, 8.0, 12.0, 16.0]])  # in a 32² input
    assert to_coco_xywh(corners, 96 / 32, 48 / 32).tolist() == [[12.0, 12.0, 24.0, 12.0]]
