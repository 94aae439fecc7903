"""The image study's ``samples``: PNG grids of a checkpoint trained a few steps, the same grids
the ImageGrids callback logs to TensorBoard."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attn_lightning.cli import main as train
from lab.studies.image.samples import write_grids

CONFIGS = Path(__file__).resolve().parents[4] / "configs"
GRIDS = {"num_samples": 4, "num_images": 2, "num_completions": 3}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with a 4-step linear-attention run ``r``: ``logs/debug/r``, ``checkpoints/...``."""
    folder = tmp_path_factory.mktemp("image")
    configs = [CONFIGS / "image" / n for n in ("base.yaml", "linear.yaml")]
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setattr(sys, "argv", ["train.py"])
        train(
            [
                "fit",
                *(
                    a
                    for c in (*configs, CONFIGS / "presets" / "debug.yaml")
                    for a in ("--config", str(c))
                ),
                "--data.init_args.batch_size=8",
                "--trainer.enable_progress_bar=false",
                f"--trainer.logger.init_args.save_dir={folder / 'logs'}",
                f"--checkpoint.root={folder / 'checkpoints'}",
                "--run_name=r",
            ]
        )
        yield folder


def _completion_shape(path: Path) -> None:
    width, height = Image.open(path).size  # 2 rows of occluded | 3 completions | original
    assert width > height > 0 and abs(width / height - 5 / 2) < 0.1


def test_short_run_logs_image_grids_and_sample_images_writes_pngs(trained, tmp_path):
    tags = set()
    for event in (trained / "logs" / "debug" / "r").glob("events.out.tfevents.*"):
        accumulator = EventAccumulator(str(event))
        accumulator.Reload()
        tags |= set(accumulator.Tags()["images"])
    assert {"samples/unconditional", "samples/completion"} <= tags
    ckpt = trained / "checkpoints" / "debug" / "r" / "last.ckpt"
    paths = write_grids(ckpt, tmp_path / "png", prefix="lin_", **GRIDS)
    assert [p.name for p in paths] == ["lin_samples.png", "lin_completions.png"]
    _completion_shape(paths[1])


def test_a_path_that_is_no_checkpoint_or_a_bad_option_is_an_error_naming_it(trained, tmp_path):
    (tmp_path / "junk.ckpt").write_bytes(b"hello")
    for name, message in (("none.ckpt", "no such file"), ("junk.ckpt", "is corrupt")):
        with pytest.raises(ValueError, match=message):
            write_grids(tmp_path / name, tmp_path / "png")
    ckpt = trained / "checkpoints" / "debug" / "r" / "last.ckpt"
    with pytest.raises(ValueError, match="split 'dev', method 'auto'; splits "):
        write_grids(ckpt, tmp_path / "png", split="dev")
    assert not (tmp_path / "png").exists()
