"""The reversal study's outcome pages are rebuilt from their committed run records alone: each
page's own ``Regenerate with`` command (``reversal report --runs docs/results/<page>/runs ...``),
written into a temporary folder, gives back the page (but its command line) and every CSV beside
it byte for byte."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from attn_lightning.studies.reversal.cli import main
from tests.docs.pages import RESULTS

PROG = "python -m attn_lightning.studies.reversal"
PAGES = (
    "optimization_reversal_report",
    "polynomial_len256",
    "polynomial_len50",
    "polynomial_len50_norm_p2",
    "polynomial_len50_norm_p4",
    "polynomial_len50_norm_p8",
    "polynomial_len50_sketch",
    "polynomial_len50_10k",
    "polynomial_len50_10k_continued",
    "polynomial_len50_10k_all",
    "polynomial_len50_learned_rerun_outcomes",
    "sequence_reversal_len256_3000steps_outcomes",
    "sequence_reversal_len256_outcomes",
    "sequence_reversal_len50_outcomes",
)


def _command(page: Path) -> list[str]:
    """The arguments of the page's ``Regenerate with`` command."""
    lines = page.read_text().splitlines()
    command = lines[lines.index("```bash") + 1]
    assert command.startswith(f"{PROG} report --runs "), command
    return shlex.split(command.removeprefix(PROG))


def _outputs(folder: Path, stem: str) -> list[str]:
    return sorted(
        p.name for p in folder.iterdir() if p.is_file() and p.name.split(".")[0] in _names(stem)
    )


def _names(stem: str) -> set[str]:
    return {stem, *(f"{stem}_{s}" for s in ("runs", "curves", "paired"))}


@pytest.mark.parametrize("stem", PAGES)
def test_page_is_rebuilt_from_its_committed_records(stem, tmp_path, monkeypatch):
    argv = _command(RESULTS / f"{stem}.md")
    out = argv.index("--out") + 1
    assert argv[out] == f"docs/results/{stem}"
    argv[out] = str(tmp_path / stem)
    monkeypatch.chdir(RESULTS.parent.parent)  # the command's paths are the checkout's
    main(argv)
    assert _outputs(tmp_path, stem) == _outputs(RESULTS, stem)
    for name in _outputs(RESULTS, stem):
        written, committed = (tmp_path / name).read_bytes(), (RESULTS / name).read_bytes()
        if name.endswith(".md"):  # the command line names the output folder
            written = written.replace(str(tmp_path).encode(), b"docs/results")
        assert written == committed, name


def test_a_missing_runs_folder_is_an_error_naming_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(RESULTS.parent.parent)
    with pytest.raises(SystemExit):
        main(["report", "--runs", "docs/results/no_such_page/runs", "--out", str(tmp_path / "x")])
    assert "--runs folder docs/results/no_such_page/runs does not exist" in capsys.readouterr().err
