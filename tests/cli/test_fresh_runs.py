"""A fresh fit removes only what a stopped attempt of this project wrote, in folders it made, and
says what it removed; a user's own files in a folder a fit is pointed at are never touched."""

from __future__ import annotations

import logging

import pytest

from attn_lightning.cli import command_line, main
from attn_lightning.cli.fresh_runs import MARKER
from tests.cli.one_line import fails_in_one_line
from tests.cli.test_run_folders import REVERSAL, TINY
from tests.cli.test_run_folders import FailAtStep as FailAtStep  # named by path in the runs

pytestmark = pytest.mark.usefixtures("cli_workdir")
FIT = ["fit", *REVERSAL, *TINY, "--trainer.max_steps=2"]
MINE = {"config.yaml": "mine", "hparams.yaml": "mine too", "record.json": "{}"}


def _write(folder, files):
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)


@pytest.mark.parametrize("where", ["mine", "logs/exp/v", "../outside"])
def test_a_users_own_folder_keeps_its_files(tmp_path, capsys, where):
    # A --checkpoint.dirpath of the user's own (a folder of theirs, the log folder itself, one
    # outside the working directory): its config.yaml & co. were deleted as a stopped fit's.
    folder = tmp_path / where
    _write(folder, MINE)
    line = fails_in_one_line([*FIT, f"--checkpoint.dirpath={where}", "--run_name=v"], capsys)
    assert "no fit made" in line and "nothing was removed" in line, line
    assert {p.name: p.read_text() for p in folder.iterdir()} == MINE


def test_a_stopped_attempt_is_cleared_where_logs_and_checkpoints_share_a_folder(tmp_path, caplog):
    # The folder came twice in the list: its second removal raised FileNotFoundError.
    shared = ["--checkpoint.dirpath=logs/exp/v", "--run_name=v"]
    with pytest.raises(RuntimeError):
        main(
            [*FIT, *shared, "--trainer.max_steps=4", f"--trainer.callbacks+={__name__}.FailAtStep"]
        )
    folder = tmp_path / "logs" / "exp" / "v"
    assert (folder / MARKER).is_file() and (folder / "config.yaml").is_file()
    with caplog.at_level(logging.INFO, logger="attn_lightning"):
        cli = main([*FIT, *shared])
    assert cli.trainer.global_step == 2
    assert f"run folder {folder.relative_to(tmp_path)} held no checkpoint" in caplog.text
    assert "removed config.yaml, curves.csv, events.out.tfevents." in caplog.text


def test_a_run_that_never_started_leaves_no_folder(tmp_path, capsys):
    fails_in_one_line([*FIT, "--run_name=r", "--model.init_args.net.d_model=-4"], capsys)
    assert not (tmp_path / "logs").exists() and not (tmp_path / "checkpoints").exists()
    command_line([*FIT, "--run_name=r"])  # and the same command, fixed, starts
