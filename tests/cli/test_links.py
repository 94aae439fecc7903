"""Sizes the data decides are linked from the DataModule into the task, stated once."""

from __future__ import annotations

from pathlib import Path

import pytest

from attn_lightning.cli import main
from attn_lightning.tasks import SequenceReversalTask
from tests.cli.one_line import BASE, TINY, fails_in_one_line

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


pytestmark = pytest.mark.usefixtures("cli_workdir")


def build(*args: str):
    return main(list(args), run=False)


def test_reversal_takes_num_symbols_and_seq_len_from_the_data():
    cli = build(
        "--config",
        str(CONFIGS / "reversal" / "base.yaml"),
        "--data.init_args.num_symbols=7",
        "--data.init_args.seq_len=12",
    )
    assert cli.model.num_symbols == 7 and cli.model.hparams["seq_len"] == 12
    assert cli.model.net.embed.weight.shape[0] == 8  # 7 digits + SEP
    # Only the links the task takes are hyper-parameters (a checkpoint must load them back).
    assert not {"levels", "image_size", "category_ids", "input_size"} & set(cli.model.hparams)


def test_a_sequence_longer_than_the_model_fails_before_the_run():
    with pytest.raises(ValueError, match=r"seq_len=600 needs model inputs of 1200 tokens"):
        build("--config", str(CONFIGS / "reversal" / "base.yaml"), "--data.init_args.seq_len=600")


def test_classification_and_detection_sizes_follow_the_data():
    digits = build(
        "--config", str(CONFIGS / "digits" / "base.yaml"), "--data.init_args.image_size=12"
    )
    assert digits.model.net.image_size == 12 and digits.model.num_classes == 10
    detection = build(
        "--config",
        str(CONFIGS / "detection" / "base.yaml"),
        "--data.init_args.scenes.num_classes=2",
    )
    assert detection.model.num_classes == 2 and detection.model.category_ids == [1, 2]


def test_a_task_paired_with_data_that_lacks_a_size_says_which(tmp_path):
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(
        "model: {class_path: attn_lightning.tasks.SequenceReversalTask}\n"
        "data: {class_path: attn_lightning.data.PixelDataModule}\n"
    )
    with pytest.raises(ValueError, match=r"SequenceReversalTask needs num_symbols from its Data"):
        build("--config", str(mixed))
    assert SequenceReversalTask(num_symbols=4).num_symbols == 4  # outside the CLI: given directly


def test_native_pixel_images_give_the_model_their_own_size():
    cli = build(
        "--config", str(CONFIGS / "image" / "base.yaml"), "--data.init_args.image_size=null"
    )
    assert cli.datamodule.image_size == 8 and cli.model.image_size == 8  # the digits' 8×8


def test_a_linked_size_set_on_the_model_is_refused_naming_the_data_option(tmp_path, capsys):
    # The link would replace it without a word, so it is one error line instead.
    line = fails_in_one_line(["fit", *BASE, *TINY, "--model.init_args.seq_len=7"], capsys)
    assert "--model.init_args.seq_len is linked from the DataModule" in line
    assert "give --data.init_args.seq_len" in line
    config = tmp_path / "sizes.yaml"
    config.write_text("model:\n  init_args:\n    num_symbols: 5\n")
    line = fails_in_one_line(["fit", *BASE, "--config", str(config), *TINY], capsys)
    assert f"{config}: model.init_args.num_symbols is linked" in line
    assert "set data.init_args.num_symbols" in line
