"""VisionTransformer: shapes and gradients per backend, projections, the pool grid, errors."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.models.detr import attention_parameters
from attn_lightning.models.specs import VitSpec, spec_fields
from attn_lightning.models.vit import VisionTransformer

SPEC = spec_fields(VitSpec)

E = 16
SOFTMAX = ({"name": "softmax"}, True)
# The paper's form: no Q/K projections, each query a sparse code over the values.
OPTIMIZATION = (
    {"name": "optimization", "dictionary": "values", "random_tokens": 2, "iterations": 3},
    "no_qk",
)
POOL = ({"name": "pool", "pool_size": 3}, "no_qk")
BACKENDS = {"softmax": SOFTMAX, "optimization": OPTIMIZATION, "pool": POOL}


def tiny(backend=SOFTMAX, **kwargs) -> VisionTransformer:
    torch.manual_seed(0)
    attention, projections = backend
    options = {"d_model": E, "num_heads": 2, "d_ff": 32, "num_layers": 2, **kwargs}
    spec = VitSpec(
        projections=projections, **{k: options.pop(k) for k in list(options) if k in SPEC}
    )
    return VisionTransformer(
        spec, **{"image_size": 8, "num_classes": 10, "attention": attention, **options}
    )


@pytest.mark.parametrize("backend", BACKENDS.values(), ids=list(BACKENDS))
@pytest.mark.parametrize("patch_size", [1, 2])
def test_logits_shape_and_every_parameter_gets_a_finite_gradient(backend, patch_size):
    model = tiny(backend, patch_size=patch_size)
    assert model.num_tokens == (8 // patch_size) ** 2
    logits = model(torch.rand(3, 8, 8))  # grey images without a channel axis, no mask
    assert logits.shape == (3, 10)
    logits.logsumexp(dim=-1).sum().backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


def test_channel_axis_is_optional_for_grey_images_and_eval_is_deterministic():
    model = tiny(OPTIMIZATION).eval()  # eval: no random tokens
    images = torch.rand(2, 8, 8)
    torch.testing.assert_close(model(images), model(images[:, None]))
    colour = tiny(in_channels=3, patch_size=4)
    assert colour(torch.rand(2, 3, 8, 8)).shape == (2, 10)


def test_projections_choose_the_attention_parameters():
    per_matrix = E * E + E  # weight and bias
    assert attention_parameters(tiny(SOFTMAX)) == 2 * 4 * per_matrix
    paper = tiny(OPTIMIZATION)
    assert attention_parameters(paper) == 2 * 2 * per_matrix  # V and out kept
    layer = paper.encoder.layers[0].attn
    assert layer.q_proj is None and layer.k_proj is None and layer.v_proj is not None
    assert layer.backend.name == "optimization"


def test_pool_pools_over_the_patch_grid():
    model = tiny(POOL, patch_size=2)
    backends = [layer.attn.backend for layer in model.encoder.layers]
    assert all(b.name == "pool" for b in backends)
    grids = []
    for backend in backends:
        backend.register_forward_pre_hook(
            lambda _, args, kwargs: grids.append(kwargs["grid"]), with_kwargs=True
        )
    images = torch.rand(2, 8, 8)
    logits = model(images)
    assert grids == [(4, 4), (4, 4)]  # each layer, each call, gets the patch grid
    # ... and pools over it: on the 4×4 grid, token (0, 0)'s 3×3 window holds (1, 0) = index 4,
    # not index 2 (which a 1-D window over the raster order would hold instead).
    pool = backends[0]
    for index, inside in ((4, True), (2, False)):
        v = torch.zeros(1, 2, 16, E // 2)  # (B, H, N, D)
        v[:, :, index] = 9.0
        assert bool(pool(v, v, v, grid=(4, 4))[0, 0, 0].abs().sum() > 0) == inside, index
    # The model's output is the 2-D pooling's: it changes when the encoder gets no grid.
    tokens = model.dropout(model.positional(model.patch_embed(images[:, None]).flatten(2).mT))
    without_grid = model.head(model.encoder(tokens).mean(dim=1))
    assert not torch.allclose(logits, without_grid)
    torch.testing.assert_close(logits, model.head(model.encoder(tokens, grid=(4, 4)).mean(dim=1)))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"patch_size": 3},
            r"patch_size \(3\) must divide image_size \(8\); allowed: \[1, 2, 4, 8\]",
        ),
        ({"image_size": 0}, r"positive ints, got \{'image_size': 0\}"),
        ({"num_classes": True}, r"positive ints, got \{'num_classes': True\}"),
        ({"positional": "alibi"}, "unknown positional encoding 'alibi'; allowed: sinusoidal"),
        ({"attention": {"name": "softmx"}}, "unknown attention 'softmx'"),
    ],
)
def test_bad_configuration_fails_clearly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny(({"name": "softmax"}, True), **kwargs) if "attention" not in kwargs else tiny(
            (kwargs.pop("attention"), True), **kwargs
        )


def test_images_of_another_size_fail_clearly():
    with pytest.raises(
        ValueError, match=r"expects images \(B, 1, 8, 8\) or \(B, H, W\), got \(2, 16, 16\)"
    ):
        tiny()(torch.rand(2, 16, 16))
