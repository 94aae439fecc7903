"""A fresh fit removes only what a stopped attempt of this project wrote, in folders it made, and
says what it removed; a user's own files in a folder a fit is pointed at are never touched. An
unwritable log folder is one line before anything is built, as an unwritable checkpoint root is
(``tests/cli/test_run_folders``)."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys

import pytest

from attn_lightning.cli import command_line, main
from attn_lightning.cli.fresh_runs import MARKER
from tests.cli.one_line import fails_in_one_line
from tests.cli.test_run_folders import REVERSAL, ROOT, TINY
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


SETPRIV = shutil.which("setpriv")


def _without_override(cmd: list[str]) -> list[str]:
    """``cmd`` run without the capabilities that let root write anywhere (a chmod is then kept)."""
    if os.geteuid() != 0:
        return cmd
    return [str(SETPRIV), "--bounding-set=-dac_override,-dac_read_search", *cmd]


def test_an_unwritable_log_folder_is_one_line(tmp_path):
    if os.geteuid() == 0 and SETPRIV is None:
        pytest.skip("as root, a read-only folder can be made unwritable only with setpriv")
    logs = tmp_path / "logs"
    logs.mkdir()
    logs.chmod(0o555)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PL_", "LOCAL_RANK"))}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "train.py"), "fit", *REVERSAL, *TINY, "--run_name=r"]
    try:
        done = subprocess.run(
            _without_override(cmd), cwd=tmp_path, env=env, capture_output=True, text=True
        )
    finally:
        logs.chmod(0o755)
    if done.returncode != 2 and os.geteuid() == 0 and "setpriv" in done.stderr:
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()}")
    lines = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    assert "--trainer.logger.init_args.save_dir 'logs' cannot hold logs" in lines[0], lines[0]
    assert "Permission denied" in lines[0]
    assert list(logs.iterdir()) == [] and not (tmp_path / "checkpoints").exists()


def test_a_folder_another_run_makes_or_removes_mid_probe_is_not_refused(tmp_path, monkeypatch):
    """Two runs started together probe one folder: the other's ``mkdir`` between our look and
    ours, and its clean-up under our probe file, are races, not an unwritable folder."""
    from pathlib import Path

    from attn_lightning.cli.fresh_runs import _unwritable

    folder = tmp_path / "logs"
    real_mkdir, real_write = Path.mkdir, Path.write_bytes
    raced = {"mkdir": False, "write": False}

    def mkdir_after_the_other(self, *args, **kwargs):
        if self == folder and not raced["mkdir"]:
            raced["mkdir"] = True
            real_mkdir(self)  # the other process wins the race
        return real_mkdir(self, *args, **kwargs)

    def write_after_the_other_cleaned_up(self, data):
        if self.parent == folder and not raced["write"]:
            raced["write"] = True
            folder.rmdir()  # the other process removes the folder it made
        return real_write(self, data)

    monkeypatch.setattr(Path, "mkdir", mkdir_after_the_other)
    monkeypatch.setattr(Path, "write_bytes", write_after_the_other_cleaned_up)
    assert _unwritable(folder) is None
    assert raced == {"mkdir": True, "write": True}


def _config(tmp_path, run: str) -> dict:
    logger = {"init_args": {"save_dir": str(tmp_path / "logs")}}
    return {
        "run_name": run,
        "experiment": "exp",
        "trainer": {"logger": logger},
        "checkpoint": {"root": str(tmp_path / "checkpoints")},
    }


def _another_run_makes_first(monkeypatch, folder) -> dict[str, bool]:
    """``folder.mkdir`` finds it made by a run started beside this one (after our look)."""
    from pathlib import Path

    real_mkdir = Path.mkdir
    raced = {"mkdir": False}

    def mkdir_after_the_other(self, *args, **kwargs):
        if self == folder and not raced["mkdir"]:
            raced["mkdir"] = True
            real_mkdir(self)
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir_after_the_other)
    return raced


def test_two_runs_started_together_share_the_experiments_folder(tmp_path, monkeypatch):
    """Two fits of one experiment started at once both make ``<save_dir>/<experiment>``: the
    one that loses the race uses the other's folder (and leaves it to it when discarding)."""
    from attn_lightning.cli.fresh_runs import discard_unused, prepare_run_folder

    raced = _another_run_makes_first(monkeypatch, tmp_path / "logs" / "exp")
    made = prepare_run_folder(_config(tmp_path, "b"))
    assert raced["mkdir"]
    assert made == [tmp_path / "logs", tmp_path / "logs" / "exp" / "b"]
    assert (tmp_path / "logs" / "exp" / "b" / MARKER).is_file()
    discard_unused(made)  # b stops before it starts: its own folder goes, the shared one stays
    assert (tmp_path / "logs" / "exp").is_dir() and not (tmp_path / "logs" / "exp" / "b").exists()


def test_a_parent_another_runs_probe_removes_under_us_is_made_again(tmp_path, monkeypatch):
    """Another run's writability probe made ``logs`` and removes it after our look: our
    ``mkdir`` of ``logs/exp`` finds no parent, and the chain is made again (as CI once hit)."""
    from pathlib import Path

    from attn_lightning.cli.fresh_runs import prepare_run_folder

    logs = tmp_path / "logs"
    logs.mkdir()  # the other run's probe folder, seen by our look
    real_mkdir = Path.mkdir
    raced = {"rmdir": False}

    def mkdir_after_the_other_cleaned_up(self, *args, **kwargs):
        if self == logs / "exp" and not raced["rmdir"]:
            raced["rmdir"] = True
            logs.rmdir()
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir_after_the_other_cleaned_up)
    made = prepare_run_folder(_config(tmp_path, "b"))
    assert raced["rmdir"]
    assert made == [logs, logs / "exp", logs / "exp" / "b"]
    assert (logs / "exp" / "b" / MARKER).is_file()


def test_two_runs_started_together_under_one_name_stop_the_second(tmp_path, monkeypatch):
    from attn_lightning.cli.fresh_runs import RunFolderError, prepare_run_folder

    raced = _another_run_makes_first(monkeypatch, tmp_path / "logs" / "exp" / "a")
    with pytest.raises(RunFolderError) as error:
        prepare_run_folder(_config(tmp_path, "a"))
    assert raced["mkdir"]
    assert str(error.value) == (
        f"run folder {str(tmp_path / 'logs' / 'exp' / 'a')!r} was made by another run starting "
        "at the same time under --run_name a: start this one with another --run_name"
    )
    assert list((tmp_path / "logs" / "exp" / "a").iterdir()) == []  # the other's: untouched


def test_a_file_where_the_folder_should_be_is_still_refused(tmp_path):
    from attn_lightning.cli.fresh_runs import _unwritable

    (tmp_path / "logs").write_text("")
    assert _unwritable(tmp_path / "logs" / "exp") == f"{tmp_path / 'logs'} is a file, not a folder"
