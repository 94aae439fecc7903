"""``--experiment`` and ``--run_name`` are names of one folder, never paths; a run without a
logger gets its own folder by the same rule as a logged one."""

from __future__ import annotations

import pytest

from attn_lightning.cli import main
from attn_lightning.cli.run_folders import RunFolderError
from attn_lightning.cli.run_names import name_problem
from tests.cli.one_line import fails_in_one_line
from tests.cli.test_run_folders import REVERSAL, TINY

pytestmark = pytest.mark.usefixtures("cli_workdir")
FIT = ["fit", *REVERSAL, *TINY, "--trainer.max_steps=1"]


@pytest.mark.parametrize(
    ("option", "value", "problem"),
    [
        ("run_name", "../../x", "holds '/'"),
        ("run_name", "{tmp}/abs", "holds '/'"),
        ("run_name", "a/b", "holds '/'"),
        ("run_name", "a\\b", "holds '\\\\'"),
        ("run_name", "", "is empty"),
        ("run_name", ".", "is '.'"),
        ("experiment", "..", "is '..'"),
        ("experiment", "{tmp}/abs", "holds '/'"),
    ],
)
def test_a_name_that_is_a_path_is_one_line_and_writes_nothing(
    tmp_path, capsys, option, value, problem
):
    value = value.format(tmp=tmp_path)  # an absolute path, kept inside the test's folder
    line = fails_in_one_line([*FIT, f"--{option}={value}"], capsys)
    assert f"--{option} {value!r} {problem}" in line and "names one folder" in line, line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_names_that_are_names_pass():
    assert all(name_problem(n) is None for n in ("r1", "my run", "v.2", "..x", "version_0"))


def test_runs_without_a_logger_get_their_own_folders(tmp_path):
    # All of them went to checkpoints/default/run/, the second as last-v1.ckpt beside the first.
    unlogged = [*FIT, "--trainer.logger=false"]
    main(unlogged)
    main([*unlogged, "--experiment=other"])
    main([*unlogged, "--run_name=r"])
    found = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("last*.ckpt"))
    assert found == [
        "checkpoints/exp/r/last.ckpt",
        "checkpoints/exp/version_0/last.ckpt",
        "checkpoints/other/version_0/last.ckpt",
    ]
    with pytest.raises(RunFolderError, match="checkpoints/exp/r' already holds a run"):
        main([*unlogged, "--run_name=r"])
    last = tmp_path / "checkpoints" / "exp" / "version_0" / "last.ckpt"
    cli = main([*unlogged, "--trainer.max_steps=2", f"--ckpt_path={last}"])  # resumed there
    assert cli.trainer.global_step == 2
    assert sorted(p.name for p in last.parent.glob("last*")) == ["last.ckpt"]
