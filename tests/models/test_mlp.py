"""The LoRA study's MLP: sizes, names, and outputs/gradients against a float64 reference."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.models.mlp import MLP


def test_default_is_784_64_64_10_with_55050_parameters():
    mlp = MLP()
    assert mlp.layer_names == ["fc1", "fc2", "fc3"] and mlp.head_name == "fc3"
    shapes = [tuple(getattr(mlp, n).weight.shape) for n in mlp.layer_names]
    assert shapes == [(64, 784), (64, 64), (10, 64)]
    assert sum(p.numel() for p in mlp.parameters()) == 55_050


def test_sized_from_the_input():
    mlp = MLP(input_size=64, hidden_sizes=[32], num_classes=3)  # 8×8 images, one hidden layer
    assert mlp.layer_names == ["fc1", "fc2"]
    assert sum(p.numel() for p in mlp.parameters()) == 64 * 32 + 32 + 32 * 3 + 3
    assert mlp(torch.rand(5, 8, 8)).shape == (5, 3)


def _reference(mlp: MLP, x: torch.Tensor) -> torch.Tensor:
    """logits = W3·relu(W2·relu(W1·x + b1) + b2) + b3, written out in float64."""
    h = x.double().flatten(1)
    for i, name in enumerate(mlp.layer_names):
        layer = getattr(mlp, name)
        h = h @ layer.weight.double().T + layer.bias.double()
        if i < mlp.num_layers - 1:
            h = torch.where(h > 0, h, torch.zeros_like(h))
    return h


def test_outputs_and_gradients_match_float64_reference():
    torch.manual_seed(0)
    mlp = MLP(input_size=36, hidden_sizes=[16, 8], num_classes=4)
    x = torch.rand(7, 6, 6)
    out = mlp(x)
    torch.testing.assert_close(out.double(), _reference(mlp, x), rtol=1e-5, atol=1e-6)
    weights = torch.randn(7, 4)
    grads = torch.autograd.grad((out * weights).sum(), list(mlp.parameters()))
    ref_mlp = MLP(input_size=36, hidden_sizes=[16, 8], num_classes=4).double()
    ref_mlp.load_state_dict({k: v.double() for k, v in mlp.state_dict().items()})
    ref_grads = torch.autograd.grad(
        (_reference(ref_mlp, x) * weights.double()).sum(), list(ref_mlp.parameters())
    )
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs", [{"input_size": 0}, {"hidden_sizes": [64, -1]}, {"num_classes": 2.5}]
)
def test_bad_sizes_are_rejected(kwargs):
    with pytest.raises(ValueError, match="MLP sizes must be positive ints"):
        MLP(**kwargs)


def test_wrong_input_size_names_both_sizes():
    with pytest.raises(ValueError, match="expects 784 input features, got 64"):
        MLP()(torch.rand(2, 8, 8))
