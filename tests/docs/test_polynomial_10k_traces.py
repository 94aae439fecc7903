"""The trajectories pages of the 10,000-step reversal runs are rebuilt from their committed run
records alone by the command each page names: page and CSVs equal to the committed ones but for
that command."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from attn_lightning.studies.reversal.cli import main
from tests.docs.pages import RESULTS

ROOT = RESULTS.parents[1]
PREFIX = "python -m attn_lightning.studies.reversal "


def _command(page: Path) -> list[str]:
    """The arguments of the ``Regenerate with`` command on ``page``."""
    line = next(x for x in page.read_text().splitlines() if x.startswith(PREFIX))
    return shlex.split(line[len(PREFIX) :])


def _without_command(path: Path) -> list[str]:
    return [x for x in path.read_text().splitlines() if not x.startswith(("# command:", PREFIX))]


@pytest.mark.parametrize(
    "name", ["polynomial_len50_10k_traces", "polynomial_len50_10k_float32_logged"]
)
def test_page_is_rebuilt_from_its_committed_records(name, tmp_path, monkeypatch):
    args = _command(RESULTS / f"{name}.md")
    at = args.index("--out")
    assert args[0] == "trajectories" and args[at + 1] == f"docs/results/{name}"
    args[at + 1] = str(tmp_path / name)
    monkeypatch.chdir(ROOT)  # the command's --runs are relative to the checkout
    main(args)
    rebuilt = sorted(p.name for p in tmp_path.iterdir() if p.suffix in (".md", ".csv"))
    assert rebuilt and all((RESULTS / f).is_file() for f in rebuilt)
    for file in rebuilt:
        assert _without_command(tmp_path / file) == _without_command(RESULTS / file), file
