"""An unwritable log folder is one line before anything is built, as an unwritable checkpoint
root is (``tests/cli/test_run_folders``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.cli.test_run_folders import REVERSAL, ROOT, TINY

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

    from attn_lightning.cli.writable import _unwritable

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


def test_a_file_where_the_folder_should_be_is_still_refused(tmp_path):
    from attn_lightning.cli.writable import _unwritable

    (tmp_path / "logs").write_text("")
    assert _unwritable(tmp_path / "logs" / "exp") == f"{tmp_path / 'logs'} is a file, not a folder"
