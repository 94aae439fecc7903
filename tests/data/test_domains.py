"""Domain shifts of the LoRA study and their DataModule."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.data.domains import (
    DOMAINS,
    DomainImageDataModule,
    apply_domain,
)


@pytest.fixture
def images():
    return torch.rand(6, 12, 12, generator=torch.Generator().manual_seed(0))


def test_original_is_unchanged_copy(images):
    out = apply_domain(images, "original")
    assert torch.equal(out, images) and out.data_ptr() != images.data_ptr()


@pytest.mark.parametrize("levels", [2, 4, 17])
def test_quantized_matches_per_pixel_reference(images, levels):
    out = apply_domain(images, "quantized", levels=levels)
    grid = torch.linspace(0, 1, levels, dtype=torch.float64)
    nearest = grid[(images.double()[..., None] - grid).abs().argmin(dim=-1)]  # nearest level
    torch.testing.assert_close(out.double(), nearest, rtol=0, atol=1e-6)
    assert len(out.unique()) <= levels


def test_inverted_is_one_minus_x(images):
    torch.testing.assert_close(apply_domain(images, "inverted"), 1.0 - images)


def test_rotated_by_90_degrees_is_rot90(images):
    # Counter-clockwise about the centre: a quarter turn is an exact pixel permutation.
    out = apply_domain(images, "rotated", angle=90.0)
    torch.testing.assert_close(out, torch.rot90(images, k=1, dims=(1, 2)), rtol=0, atol=1e-5)
    small = apply_domain(images, "rotated", angle=15.0)
    assert small.shape == images.shape and small.min() >= 0.0 and small.max() <= 1.0
    assert not torch.allclose(small, images)


@pytest.mark.parametrize("domain", DOMAINS)
def test_shifts_are_deterministic(images, domain):
    assert torch.equal(apply_domain(images, domain), apply_domain(images, domain))


def test_bad_domain_and_levels_are_rejected(images):
    with pytest.raises(ValueError, match=r"unknown domain 'blurred'; allowed: original, quan"):
        apply_domain(images, "blurred")
    with pytest.raises(ValueError, match="levels must be an int >= 2"):
        apply_domain(images, "quantized", levels=1)
    with pytest.raises(ValueError, match="unknown domain"):
        DomainImageDataModule(domain="blurred")
    with pytest.raises(ValueError, match="unknown image source"):
        DomainImageDataModule(source="cifar")
    with pytest.raises(ValueError, match="download=True only applies to source 'mnist'"):
        DomainImageDataModule(source="digits", download=True)


def test_datamodule_batches_are_shifted_digits():
    original = DomainImageDataModule(image_size=28, batch_size=32)
    inverted = DomainImageDataModule(image_size=28, batch_size=32, domain="inverted")
    assert original.input_size == 784
    for data in (original, inverted):
        data.setup("fit")
    a, b = next(iter(original.val_dataloader())), next(iter(inverted.val_dataloader()))
    assert a["image"].shape == (32, 28, 28) and a["label"].dtype == torch.int64
    assert torch.equal(a["label"], b["label"])
    torch.testing.assert_close(b["image"], 1.0 - a["image"])
    sizes = [len(original.datasets[s]) for s in ("train", "val", "test")]
    assert sum(sizes) == 1797 and sizes[0] > sizes[1]


def test_normalize_mnist_constants_and_the_domain_s_own_train_statistics():
    plain = DomainImageDataModule(image_size=8, domain="inverted")
    mnist = DomainImageDataModule(image_size=8, domain="inverted", normalize="mnist")
    own = DomainImageDataModule(image_size=8, domain="inverted", normalize="domain")
    for data in (plain, mnist, own):
        data.setup("fit")
    x = {s: plain.datasets[s].tensors[0] for s in ("train", "val", "test")}
    for split, images in x.items():
        torch.testing.assert_close(mnist.datasets[split].tensors[0], (images - 0.1307) / 0.3081)
    # domain: the train split's statistics, applied unchanged to val and test (never their own).
    mean, std = float(x["train"].mean()), float(x["train"].std())
    train = own.datasets["train"].tensors[0]
    assert abs(float(train.mean())) < 1e-5 and abs(float(train.std()) - 1.0) < 1e-5
    torch.testing.assert_close(own.datasets["test"].tensors[0], (x["test"] - mean) / std)
    assert torch.equal(own.datasets["test"].tensors[1], plain.datasets["test"].tensors[1])


def test_unknown_normalize_is_named():
    with pytest.raises(
        ValueError, match=r"unknown normalize 'zscore'; allowed: none, mnist, domain"
    ):
        DomainImageDataModule(normalize="zscore")
