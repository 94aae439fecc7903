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
