"""``source: mnist`` on tiny IDX files written here in the real format, and the opt-in download.

The IDX format (http://yann.lecun.com/exdb/mnist/, the layout torchvision reads): a big-endian
magic ``0x00 0x00 <type> <ndim>`` (type 0x08 = uint8, so 0x00000803 for images ``[n, 28, 28]``
and 0x00000801 for labels ``[n]``), then one big-endian uint32 per dimension, then the data in
C order. No test here touches the network: ``no_network`` makes every socket connect fail.
"""

from __future__ import annotations

import gzip
import socket
import struct
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.datasets import MNIST

from attn_lightning.data import images as images_module
from attn_lightning.data.domains import DomainImageDataModule
from attn_lightning.data.images import (
    MNIST_FILES,
    MNIST_MIRRORS,
    MNISTDownloadError,
    load_images,
    prepare_mnist,
)
from attn_lightning.data.pixels import PixelDataModule

N_TRAIN, N_TEST = 24, 6  # val = the last 24 // 12 = 2 training images (5,000 of MNIST's 60,000)


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection fails, as on an offline machine."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("network disabled in tests")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def idx_bytes(array: np.ndarray) -> bytes:
    """``array`` (uint8) in the IDX format: magic, big-endian sizes, raw data."""
    assert array.dtype == np.uint8
    magic = struct.pack(">BBBB", 0, 0, 0x08, array.ndim)
    sizes = struct.pack(f">{array.ndim}I", *array.shape)
    return magic + sizes + array.tobytes(order="C")


def pattern(n: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` distinct 28×28 uint8 images with known pixels, and labels ``(offset + i) % 10``."""
    i, r, c = np.meshgrid(np.arange(n), np.arange(28), np.arange(28), indexing="ij")
    images = ((offset + i) * 37 + r * 3 + c * 5) % 256  # pixel (i, r, c), all 0..255 reachable
    images[:, 0, 0] = 255  # a top-left marker: raster order and orientation are checkable
    images[:, 27, 27] = 0
    labels = (offset + np.arange(n)) % 10
    return images.astype(np.uint8), labels.astype(np.uint8)


def write_mnist(root: Path, *, gz: bool | str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The four IDX files under ``root/MNIST/raw`` (``gz``: True, False or "mixed")."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    arrays = {"train": pattern(N_TRAIN, 0), "t10k": pattern(N_TEST, 100)}
    for k, name in enumerate(MNIST_FILES):
        prefix, kind = name.split("-")[:2]
        data = idx_bytes(arrays[prefix][0 if kind == "images" else 1])
        compress = gz is True or (gz == "mixed" and k % 2 == 0)
        if compress:
            (raw / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (raw / name).write_bytes(data)
    return arrays


def test_idx_writer_uses_the_real_header() -> None:
    data = idx_bytes(np.zeros((3, 28, 28), np.uint8))
    assert data[:4] == bytes.fromhex("00000803") and struct.unpack(">3I", data[4:16]) == (3, 28, 28)
    assert len(data) == 16 + 3 * 28 * 28
    assert idx_bytes(np.zeros(5, np.uint8))[:8] == bytes.fromhex("00000801") + struct.pack(">I", 5)


@pytest.mark.parametrize("gz", [False, True, "mixed"])
def test_loader_returns_the_files_pixels_labels_and_splits(tmp_path: Path, gz: bool | str) -> None:
    arrays = write_mnist(tmp_path, gz=gz)
    split = {s: load_images("mnist", split=s, root=tmp_path) for s in ("train", "val", "test")}
    n_val = N_TRAIN // 12
    expected = {
        "train": (arrays["train"][0][: N_TRAIN - n_val], arrays["train"][1][: N_TRAIN - n_val]),
        "val": (arrays["train"][0][N_TRAIN - n_val :], arrays["train"][1][N_TRAIN - n_val :]),
        "test": arrays["t10k"],
    }
    for name, (x, y) in split.items():
        pixels, labels = expected[name]
        assert x.shape == (len(pixels), 28, 28) and x.dtype == torch.float32
        assert y.shape == (len(pixels),) and y.dtype == torch.int64
        assert torch.equal(x, torch.from_numpy(pixels).float() / 255.0)  # 8-bit p -> p / 255
        assert torch.equal(y, torch.from_numpy(labels).long())
        assert x.is_contiguous()
    assert [len(x) for x, _ in split.values()] == [22, 2, 6]
    raw = tmp_path / "MNIST" / "raw"
    for name in MNIST_FILES:  # .gz decompressed beside itself, the original kept
        assert (raw / name).is_file()
    assert not list(raw.glob("*.partial-*"))


def test_val_is_at_most_5000_images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap binds only above 60,000 training images; shrink it to see it bind on 24.
    write_mnist(tmp_path, gz=False)
    monkeypatch.setattr(images_module, "_MNIST_VAL", 1)
    val, _ = load_images("mnist", split="val", root=tmp_path)
    train, _ = load_images("mnist", split="train", root=tmp_path)
    assert (len(train), len(val)) == (N_TRAIN - 1, 1)


def test_resize_keeps_the_range(tmp_path: Path) -> None:
    write_mnist(tmp_path, gz=True)
    x, _ = load_images("mnist", split="test", root=tmp_path, image_size=14)
    assert x.shape == (N_TEST, 14, 14) and x.min() >= 0.0 and x.max() <= 1.0


def test_pixel_datamodule_tokens_are_the_8bit_pixels(tmp_path: Path) -> None:
    arrays = write_mnist(tmp_path, gz=True)
    data = PixelDataModule(source="mnist", root=str(tmp_path), levels=256, batch_size=4)
    assert data.seq_len == 784
    data.prepare_data()
    data.setup("fit")
    assert [len(data.datasets[s]) for s in ("train", "val", "test")] == [22, 2, 6]
    batch = next(iter(data.train_dataloader()))
    assert batch["pixels"].shape == (4, 784) and batch["pixels"].dtype == torch.int64
    assert batch["label"].shape == (4,) and batch["label"].dtype == torch.int64
    test = next(iter(data.test_dataloader()))  # in order: the file's first four images
    expected = torch.from_numpy(arrays["t10k"][0][:4]).long().flatten(1)  # raster order
    assert torch.equal(test["pixels"], expected)
    assert torch.equal(test["label"], torch.from_numpy(arrays["t10k"][1][:4]).long())


def test_domain_datamodule_batches_on_mnist(tmp_path: Path) -> None:
    write_mnist(tmp_path, gz=False)
    original = DomainImageDataModule(source="mnist", root=str(tmp_path), batch_size=3)
    inverted = DomainImageDataModule(
        source="mnist", root=str(tmp_path), batch_size=3, domain="inverted"
    )
    for data in (original, inverted):
        data.prepare_data()
        data.setup("fit")
    a, b = next(iter(original.test_dataloader())), next(iter(inverted.test_dataloader()))
    assert a["image"].shape == (3, 28, 28) and a["label"].tolist() == [0, 1, 2]
    torch.testing.assert_close(b["image"], 1.0 - a["image"])
    assert next(iter(original.train_dataloader()))["image"].shape == (3, 28, 28)


@pytest.fixture
def forbid_download(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if torchvision's downloader or urllib is reached."""

    def fail(*args: object, **kwargs: object) -> None:
        pytest.fail("a download was attempted although download is off by default")

    monkeypatch.setattr(MNIST, "download", fail)
    monkeypatch.setattr(urllib.request, "urlopen", fail)


@pytest.mark.usefixtures("forbid_download")
def test_default_never_downloads(tmp_path: Path) -> None:
    write_mnist(tmp_path, gz=True)
    load_images("mnist", split="val", root=tmp_path)
    for data in (
        PixelDataModule(source="mnist", root=str(tmp_path)),
        DomainImageDataModule(source="mnist", root=str(tmp_path)),
    ):
        assert data.download is False
        data.prepare_data()
        data.setup("fit")
    empty = tmp_path / "empty"
    with pytest.raises(FileNotFoundError) as info:
        load_images("mnist", root=empty)
    message = str(info.value)
    for needed in (*MNIST_FILES, "MNIST/raw", "download: true", MNIST_MIRRORS[0], "digits"):
        assert needed in message
    PixelDataModule(source="mnist", root=str(empty)).prepare_data()  # nothing to do, no error


@pytest.mark.usefixtures("forbid_download")
def test_download_true_with_files_present_fetches_nothing(tmp_path: Path) -> None:
    write_mnist(tmp_path, gz=True)
    x, _ = load_images("mnist", split="test", root=tmp_path, download=True)
    assert len(x) == N_TEST
    data = PixelDataModule(source="mnist", root=str(tmp_path), download=True)
    data.prepare_data()
    data.setup("fit")


def test_offline_download_fails_with_the_cause_and_the_manual_steps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []

    def offline(request: urllib.request.Request | str, *args: object, **kwargs: object) -> None:
        calls.append(request.full_url if isinstance(request, urllib.request.Request) else request)
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)  # what torchvision's downloader uses
    with pytest.raises(MNISTDownloadError) as info:
        load_images("mnist", root=tmp_path, download=True)
    assert isinstance(info.value, FileNotFoundError)  # train.py prints it as one error: line
    assert isinstance(info.value.__cause__, RuntimeError)  # torchvision's, after every mirror
    message = str(info.value)
    raw = str((tmp_path / "MNIST" / "raw").resolve())
    assert f"download of MNIST to {raw} failed" in message
    assert "Temporary failure in name resolution" in message  # the original error text
    assert "train-images-idx3-ubyte.gz" in message and MNIST_MIRRORS[0] in message
    assert calls and all(url.startswith(MNIST_MIRRORS) for url in calls)  # went via torchvision


@pytest.mark.parametrize("module", [PixelDataModule, DomainImageDataModule])
def test_datamodule_download_runs_in_prepare_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: type
) -> None:
    calls: list[str] = []

    def broken(self: MNIST) -> None:
        calls.append(self.root)
        raise RuntimeError("Error downloading train-images-idx3-ubyte.gz: no route to host")

    monkeypatch.setattr(MNIST, "download", broken)
    data = module(source="mnist", root=str(tmp_path), download=True)
    with pytest.raises(MNISTDownloadError, match=r"download of MNIST to .* failed.*no route to"):
        data.prepare_data()
    assert calls == [str(tmp_path)]

    def mirror(self: MNIST) -> None:  # a working download: the files appear under raw/
        calls.append(self.root)
        write_mnist(Path(self.root), gz=False)  # torchvision leaves them extracted

    monkeypatch.setattr(MNIST, "download", mirror)
    data.prepare_data()
    data.setup("fit")  # download=True again in setup: the files are there, no second fetch
    assert len(calls) == 2 and len(data.datasets["test"]) == N_TEST


def test_download_only_applies_to_mnist() -> None:
    for make in (
        lambda: load_images("digits", download=True),
        lambda: PixelDataModule(source="digits", download=True),
        lambda: DomainImageDataModule(download=True),
    ):
        with pytest.raises(ValueError, match=r"download=True only applies to source 'mnist'"):
            make()
    with pytest.raises(ValueError, match="download must be true or false, got 'yes'"):
        load_images("mnist", download="yes")  # type: ignore[arg-type]


def test_corrupt_gz_is_reported_or_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_mnist(tmp_path, gz=True)
    packed = tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz"
    packed.write_bytes(packed.read_bytes()[:20])  # truncated, as by an interrupted download
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte.gz is not a complete gzip"):
        prepare_mnist(tmp_path)
    assert not list(packed.parent.glob("*.partial-*"))
    fetched: list[str] = []

    def mirror(self: MNIST) -> None:  # with download=True the bad file goes to the downloader
        fetched.append(self.root)
        write_mnist(Path(self.root), gz=False)

    monkeypatch.setattr(MNIST, "download", mirror)
    _, labels = load_images("mnist", split="test", root=tmp_path, download=True)
    assert fetched == [str(tmp_path)] and labels.tolist() == [0, 1, 2, 3, 4, 5]


def test_mirrors_are_torchvisions() -> None:
    # The README and the error messages quote these; they must be where torchvision looks.
    assert tuple(MNIST.mirrors) == MNIST_MIRRORS
    assert [name for name, _ in MNIST.resources] == [f"{name}.gz" for name in MNIST_FILES]
