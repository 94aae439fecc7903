"""Pixel sequences: quantisation, raster order, splits, sizes and clear errors."""

from __future__ import annotations

import math

import pytest
import torch

from attn_lightning.data.pixels import (
    PixelDataModule,
    dequantize,
    histogram_bits_per_dim,
    quantize,
)


def test_quantize_maps_8bit_pixels_back_to_their_values_in_raster_order():
    values = torch.arange(256).view(1, 16, 16)
    tokens = quantize(values.float() / 255.0, 256)
    assert tokens.shape == (1, 256)
    assert torch.equal(tokens[0], torch.arange(256))  # row r, column c -> token r·W + c
    images = torch.rand(3, 4, 5)
    tokens = quantize(images, 256)
    assert tokens[1, 2 * 5 + 3] == round(float(images[1, 2, 3]) * 255)
    back = dequantize(tokens, 256, height=4, width=5)
    assert back.shape == (3, 1, 4, 5)
    assert (back[:, 0] - images).abs().max() <= 0.5 / 255 + 1e-6


def test_quantize_levels_and_clamping():
    images = torch.tensor([[[-0.2, 0.0, 0.49, 0.51, 1.0, 1.3]]])
    assert quantize(images, 2).tolist() == [[0, 0, 0, 1, 1, 1]]
    assert quantize(images, 17).max() == 16


@pytest.mark.parametrize(("image_size", "seq_len"), [(None, 64), (28, 784)])
def test_digits_datamodule_shapes_and_levels(image_size, seq_len):
    data = PixelDataModule(image_size=image_size, levels=256, batch_size=5)
    data.setup("fit")
    assert data.seq_len == seq_len
    sizes = {split: len(data.datasets[split]) for split in ("train", "val", "test")}
    assert sum(sizes.values()) == 1797 and sizes["train"] > sizes["val"] > 0
    batch = next(iter(data.train_dataloader()))
    assert batch["pixels"].shape == (5, seq_len) and batch["pixels"].dtype == torch.int64
    assert batch["label"].shape == (5,)
    pixels = data.datasets["train"].pixels
    assert pixels.min() >= 0 and pixels.max() <= 255
    if image_size is None:  # the digits' 17 grey levels k/16 land on round(k/16·255)
        assert set(pixels.unique().tolist()) <= {round(k / 16 * 255) for k in range(17)}


def test_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="digits, mnist"):
        PixelDataModule(source="cifar")
    with pytest.raises(ValueError, match="levels"):
        PixelDataModule(levels=1)
    with pytest.raises(ValueError, match="batch_size"):
        PixelDataModule(batch_size=0)
    with pytest.raises(ValueError, match="download=True only applies to source 'mnist'"):
        PixelDataModule(source="digits", download=True)
    data = PixelDataModule(source="mnist", root=str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"MNIST.*download: true"):
        data.setup("fit")


# ---------------------------------------------------------------------------- histogram baseline
def test_histogram_bits_per_dim_by_hand():
    # Levels used in training: {0, 1} of 4. Position 0: counts 2, 1 -> (2.5, 1.5) / 4;
    # position 1: counts 0, 3 -> (0.5, 3.5) / 4. Eval [1, 0]: −(log₂ 0.375 + log₂ 0.125) / 2.
    train = torch.tensor([[0, 1], [0, 1], [1, 1]])
    evaluated = torch.tensor([[1, 0]])
    want = (
        -(math.log2(1.5 / 4) + math.log2(0.5 / 4)) / 2
    )  # 2.2075 (all 4 levels: 2.5295, nats: 1.53)
    assert histogram_bits_per_dim(train, evaluated, 4) == pytest.approx(want, abs=1e-12)
    assert histogram_bits_per_dim(train, evaluated, 4, held_out_from=1) == pytest.approx(3.0)
    # add-1: position 0 (3, 2) / 5, position 1 (1, 4) / 5
    add_one = -(math.log2(2 / 5) + math.log2(1 / 5)) / 2
    assert histogram_bits_per_dim(train, evaluated, 4, smoothing=1.0) == pytest.approx(add_one)


def test_histogram_bits_per_dim_errors():
    train = torch.tensor([[0, 1], [1, 1]])
    with pytest.raises(ValueError, match=r"never seen in training: \[2\]"):
        histogram_bits_per_dim(train, torch.tensor([[2, 1]]), 4)
    with pytest.raises(ValueError, match="smoothing"):
        histogram_bits_per_dim(train, train, 4, smoothing=0.0)
    with pytest.raises(ValueError, match="held_out_from"):
        histogram_bits_per_dim(train, train, 4, held_out_from=2)
    with pytest.raises(ValueError, match=r"tokens must lie in \[0, 1\)"):
        histogram_bits_per_dim(train, train, 1)
    with pytest.raises(ValueError, match="2 training pixels per image, 3 evaluated"):
        histogram_bits_per_dim(train, torch.zeros(1, 3, dtype=torch.long), 4)
