"""Run folders and checkpoints: a fresh fit never mixes into an existing run, a resume appends to
its TensorBoard run with one point per step, a checkpoint of another experiment is refused, and
every subcommand ends with where its outputs went; ``--experiment`` and ``--run_name`` name one
folder, never paths, and a run without a logger gets its own folder by the same rule."""

from __future__ import annotations

import logging
import re
import shlex
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attn_lightning.cli import command_line, main
from attn_lightning.cli.checkpoints import CheckpointError
from attn_lightning.cli.progress import PlainProgress, StepProgressBar, progress_callbacks
from attn_lightning.cli.run_folders import RunFolderError, name_problem
from tests.cli.one_line import fails_in_one_line

ROOT = Path(__file__).resolve().parents[2]
REVERSAL = ["--config", str(ROOT / "configs" / "reversal" / "base.yaml")]
TINY = [
    "--data.init_args.train_size=64",
    "--data.init_args.val_size=32",
    "--data.init_args.test_size=32",
    "--data.init_args.batch_size=8",
    "--trainer.log_every_n_steps=1",
    "--trainer.val_check_interval=4",
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.enable_progress_bar=false",
    "--experiment=exp",
]


pytestmark = pytest.mark.usefixtures("cli_workdir")


def _fit(*extra: str):
    return main(["fit", *REVERSAL, *TINY, *extra])


def _steps(log_dir: Path, tag: str) -> list[int]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return [e.step for e in events.Scalars(tag)]


def test_fresh_fit_into_an_existing_run_folder_is_refused(tmp_path):
    _fit("--run_name=r", "--trainer.max_steps=2")
    held = r"exp/r' already holds a run; resume it with --ckpt_path checkpoints/exp/r/last"
    with pytest.raises(RunFolderError, match=held):
        _fit("--run_name=r", "--trainer.max_steps=2")
    # Both ways out work: another run name, or resuming the run.
    _fit("--run_name=r2", "--trainer.max_steps=2")
    last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
    cli = _fit("--run_name=r", "--trainer.max_steps=4", "--ckpt_path", str(last))
    assert cli.trainer.global_step == 4
    assert sorted(p.name for p in last.parent.glob("last*.ckpt")) == ["last.ckpt"]


class FailAtStep(Callback):
    """Raises ``error`` at the start of step 2: after logging began, before any checkpoint."""

    error: type[BaseException] = RuntimeError

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 2:
            raise self.error("stopped before the first checkpoint")


class InterruptAtStep(FailAtStep):
    error = KeyboardInterrupt


@pytest.mark.parametrize(
    ("callback", "raised"), [("FailAtStep", RuntimeError), ("InterruptAtStep", SystemExit)]
)
def test_a_run_stopped_before_its_first_checkpoint_can_be_retried(tmp_path, callback, raised):
    # An error or Ctrl-C after the logger wrote its first events but before any checkpoint: the
    # folder holds no run to resume, so the same --run_name starts afresh in it.
    with pytest.raises(raised):
        _fit("--run_name=r", "--trainer.max_steps=4", f"--trainer.callbacks+={__name__}.{callback}")
    logs = tmp_path / "logs" / "exp" / "r"
    assert list(logs.glob("events.out.tfevents.*")) and not list(tmp_path.rglob("*.ckpt"))
    cli = _fit("--run_name=r", "--trainer.max_steps=4")
    assert cli.trainer.global_step == 4
    steps = _steps(logs, "train/loss_step")
    assert steps == [0, 1, 2, 3], steps  # the stopped attempt's points are gone
    assert sorted(p.name for p in logs.glob("config*.yaml")) == ["config.yaml"]


def test_a_folder_without_a_checkpoint_but_other_files_names_what_to_delete(tmp_path):
    stray = tmp_path / "logs" / "exp" / "r" / "notes.txt"
    stray.parent.mkdir(parents=True)
    stray.write_text("mine")
    with pytest.raises(RunFolderError, match=r"holds no checkpoint.*notes\.txt.*delete"):
        _fit("--run_name=r", "--trainer.max_steps=2")
    assert stray.read_text() == "mine"


def test_resume_appends_one_point_per_step_to_tensorboard(tmp_path):
    # An interrupted run: checkpoint at step 4, then steps 5..6 logged before the "crash".
    _fit("--run_name=r", "--trainer.max_steps=6", "--checkpoint.every_n_train_steps=4")
    early = tmp_path / "checkpoints" / "exp" / "r" / "early.ckpt"
    step4 = next((tmp_path / "checkpoints" / "exp" / "r").glob("best-step=4*.ckpt"), None)
    assert step4 is not None
    early.write_bytes(step4.read_bytes())
    _fit("--run_name=r", "--trainer.max_steps=8", "--ckpt_path", str(early))
    steps = _steps(tmp_path / "logs" / "exp" / "r", "train/loss_step")
    assert steps == sorted(set(steps)) and steps[-1] == 7, steps  # 0..7, none twice


def test_checkpoint_of_another_task_is_refused(tmp_path):
    _fit("--run_name=r", "--trainer.max_steps=1")
    last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
    image = ["--config", str(ROOT / "configs" / "image" / "base.yaml")]
    with pytest.raises(CheckpointError, match=r"holds a SequenceReversalTask task .* builds Image"):
        main(["validate", *image, "--ckpt_path", str(last)])


def test_every_subcommand_ends_with_a_summary(tmp_path, caplog, capfd):
    with caplog.at_level(logging.INFO, logger="attn_lightning"):
        _fit("--run_name=r", "--trainer.max_steps=2")
        last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
        main(["test", *REVERSAL, *TINY, "--ckpt_path", str(last)])
        main(["validate", *REVERSAL, *TINY, "--ckpt_path", str(last)])
    text = caplog.text
    assert (
        "fit done in" in text and f"last checkpoint: {Path('checkpoints/exp/r/last.ckpt')}" in text
    )
    assert "logs: logs/exp/r   (tensorboard --logdir logs/exp)" in text
    assert "test done in" in text and "test/token_acc" in text
    # The checkpoint's step, not the fresh trainer's 0; its metrics once (no table, no hp/ twins).
    assert re.search(rf"validate done in \d+s \(checkpoint of step 2: {last}\)", text)
    printed = text + capfd.readouterr().out
    assert "validation at step 0" not in printed and "hp/val_loss" not in printed
    assert printed.count("val/token_acc") == 1


def test_plain_progress_lines_when_not_a_terminal(caplog):
    with caplog.at_level(logging.INFO, logger="attn_lightning"):
        callbacks = progress_callbacks([], terminal=False)
        assert any(isinstance(c, PlainProgress) for c in callbacks)
        _fit("--run_name=r", "--trainer.max_steps=4", "--trainer.enable_progress_bar=true")
    assert "validation at step 4" in caplog.text


def test_progress_callbacks_swap_only_the_default_bar():
    from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar

    on_terminal = progress_callbacks([TQDMProgressBar(), RichProgressBar()], terminal=True)
    assert all(isinstance(c, StepProgressBar) for c in on_terminal[:2])
    assert isinstance(progress_callbacks([RichProgressBar()], terminal=False)[0], PlainProgress)
    mine = StepProgressBar(refresh_rate=5)
    assert progress_callbacks([mine], terminal=False)[0] is mine


class SigtermAtStep6(Callback):
    """What a SIGTERM does at step 6 of a run's first session (Lightning's flag, as RunCheckpoint's
    Ctrl-C handler sets it): the run stops at the step's end, saves last.ckpt and prints how to
    resume."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == 6 and trainer.ckpt_path is None:
            trainer._signal_connector.received_sigterm = True


def _scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(log_dir))
    events.Reload()
    return {t: [(e.step, e.value) for e in events.Scalars(t)] for t in events.Tags()["scalars"]}


@pytest.mark.parametrize(
    ("first", "run", "folder"),
    [
        (["--run_name=r"], "r", "checkpoints/exp/r"),
        ([], "version_0", "checkpoints/exp/version_0"),
        (["--run_name=r", "--checkpoint.dirpath=mine"], "r", "mine"),  # the hint adds --run_name
    ],
    ids=["run_name", "version_N", "dirpath"],
)
def test_the_sigterm_hint_followed_literally_continues_the_run(
    tmp_path, capsys, first, run, folder
):
    args = ["fit", *REVERSAL, *TINY, "--trainer.max_steps=8"]
    args += [f"--trainer.callbacks+={__name__}.SigtermAtStep6"]
    args += [a for a in first if a.startswith("--checkpoint")]
    with pytest.raises(SystemExit):
        command_line([*args, *first])
    hint = re.search(r"stopped by SIGTERM after step 6; resume with (.*)", capsys.readouterr().err)
    assert hint, "no resume hint"
    command_line([*args, *shlex.split(hint.group(1))])  # the configs + the hint, as printed
    assert [p.name for p in (tmp_path / "logs" / "exp").iterdir()] == [run]
    checkpoints = {p.parent for p in tmp_path.rglob("*.ckpt")}
    assert checkpoints == {tmp_path / folder}, checkpoints
    assert torch.load(tmp_path / folder / "last.ckpt", weights_only=True)["global_step"] == 8
    logs = tmp_path / "logs" / "exp" / run
    scalars = _scalars(logs)
    assert [s for s, _ in scalars["train/loss_step"]] == list(range(8))
    # The hparams tab's placeholders once, not a second (0, nan) point per resume.
    assert [s for s, _ in scalars["hp/val_loss"]] == [0, 3, 7], scalars["hp/val_loss"]
    assert sorted(p.name for p in logs.glob("config*.yaml")) == ["config.yaml"]


def test_a_resume_with_changed_settings_keeps_both_configs(tmp_path):
    _fit("--run_name=r", "--trainer.max_steps=4")
    last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
    _fit("--trainer.max_steps=4", "--ckpt_path", str(last))  # the same settings: nothing new
    logs = tmp_path / "logs" / "exp" / "r"
    assert sorted(p.name for p in logs.glob("config*.yaml")) == ["config.yaml"]
    _fit("--trainer.max_steps=6", "--ckpt_path", str(last))  # longer: the new config beside it
    assert sorted(p.name for p in logs.glob("config*.yaml")) == ["config-1.yaml", "config.yaml"]
    assert "max_steps: 6" in (logs / "config-1.yaml").read_text()
    assert [p.name for p in (tmp_path / "logs" / "exp").iterdir()] == ["r"]


def test_another_run_name_resumes_into_that_folder(tmp_path):
    _fit("--run_name=r", "--trainer.max_steps=4")
    last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
    cli = _fit("--run_name=fork", "--trainer.max_steps=6", "--ckpt_path", str(last))
    assert cli.trainer.log_dir == str(Path("logs") / "exp" / "fork")
    assert (tmp_path / "checkpoints" / "exp" / "fork" / "last.ckpt").is_file()


def test_evaluations_of_a_run_log_beside_it(tmp_path):
    _fit("--run_name=r", "--trainer.max_steps=4")
    last = tmp_path / "checkpoints" / "exp" / "r" / "last.ckpt"
    for subcommand in ("validate", "test", "test", "predict"):
        cli = main([subcommand, *REVERSAL, *TINY, "--ckpt_path", str(last)])
        assert cli.trainer.log_dir == str(Path("logs") / "exp" / "r" / subcommand)
    assert [p.name for p in (tmp_path / "logs" / "exp").iterdir()] == ["r"]
    assert (
        tmp_path / "logs" / "exp" / "r" / "predict" / "predictions" / "predictions.csv"
    ).is_file()
    evaluation = tmp_path / "logs" / "exp" / "r" / "test"
    assert "test/loss" in _scalars(evaluation)
    assert sorted(p.name for p in evaluation.glob("config*.yaml")) == ["config.yaml"]
    # --run_name still says where: a copy of the checkpoint evaluated as its own run.
    cli = main(["validate", *REVERSAL, *TINY, "--run_name=v", "--ckpt_path", str(last)])
    assert cli.trainer.log_dir == str(Path("logs") / "exp" / "v")
    # The run's own name given (as the LoRA configs give it): beside the run all the same, not
    # in the fit's event files.
    cli = main(["validate", *REVERSAL, *TINY, "--run_name=r", "--ckpt_path", str(last)])
    assert cli.trainer.log_dir == str(Path("logs") / "exp" / "r" / "validate")


@pytest.mark.parametrize("root", ["/proc/x", "a_file", "a_file/below"])
def test_an_unwritable_checkpoint_root_is_one_line_before_the_first_step(tmp_path, capsys, root):
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(SystemExit) as exit_info:
        command_line(
            ["fit", *REVERSAL, *TINY, "--trainer.max_steps=2", f"--checkpoint.root={root}"]
        )
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"--checkpoint.root '{root}' cannot hold checkpoints" in lines[0], lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # no log folder left behind


def test_ckpt_path_last_resumes_the_runs_own_last_checkpoint(tmp_path):
    # Lightning found no "last" (its callback had saved nothing yet): a fit from step 0 inside
    # the run, writing last-v1.ckpt beside last.ckpt.
    _fit("--run_name=r", "--trainer.max_steps=4")
    cli = _fit("--run_name=r", "--trainer.max_steps=8", "--ckpt_path=last")
    assert cli.trainer.global_step == 8
    folder = tmp_path / "checkpoints" / "exp" / "r"
    assert sorted(p.name for p in folder.glob("last*.ckpt")) == ["last.ckpt"]
    assert _steps(tmp_path / "logs" / "exp" / "r", "train/loss_step") == list(range(8))
    cli = main(["validate", *REVERSAL, *TINY, "--run_name=r", "--ckpt_path=last"])
    assert cli.trainer.log_dir == str(Path("logs") / "exp" / "r" / "validate")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "--ckpt_path last needs the run"),
        (["--run_name=nope"], "last: there is no checkpoints"),
    ],
)
def test_ckpt_path_last_without_a_run_to_resume_is_one_line(capsys, extra, message):
    args = ["fit", *REVERSAL, *TINY, "--trainer.max_steps=2", "--ckpt_path=last", *extra]
    with pytest.raises(SystemExit) as exit_info:
        command_line(args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and message in err, err


def test_ckpt_path_best_evaluates_the_runs_best_checkpoint(tmp_path):
    # Lightning knows "best" only after a fit in the same process: a fresh validate refused it
    # ("ModelCheckpoint is not configured to save the best model").
    _fit("--run_name=r", "--trainer.max_steps=4")
    folder = tmp_path / "checkpoints" / "exp" / "r"
    (best,) = folder.glob("best*.ckpt")
    cli = main(["validate", *REVERSAL, *TINY, "--run_name=r", "--ckpt_path=best"])
    assert cli.trainer.ckpt_path == str(Path("checkpoints") / "exp" / "r" / best.name)
    assert cli.trainer.log_dir == str(Path("logs") / "exp" / "r" / "validate")


@pytest.mark.parametrize(
    ("subcommand", "extra", "message"),
    [
        ("validate", [], "--ckpt_path best needs the run whose best*.ckpt to use"),
        ("test", ["--run_name=nope"], "best: there is no checkpoints"),
        ("fit", ["--run_name=r"], "fit resumes a run from its last.ckpt (--ckpt_path last)"),
    ],
)
def test_ckpt_path_best_without_one_best_is_one_line(capsys, subcommand, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        command_line([subcommand, *REVERSAL, *TINY, "--ckpt_path=best", *extra])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: ") and message in err, err


def test_ckpt_path_best_with_two_best_files_names_them(tmp_path, capsys):
    _fit("--run_name=r", "--trainer.max_steps=4")
    folder = tmp_path / "checkpoints" / "exp" / "r"
    (best,) = folder.glob("best*.ckpt")
    (folder / "best-step=2.ckpt").write_bytes(best.read_bytes())
    with pytest.raises(SystemExit):
        command_line(["test", *REVERSAL, *TINY, "--run_name=r", "--ckpt_path=best"])
    err = capsys.readouterr().err
    assert f"holds 2 best checkpoints (best-step=2.ckpt, {best.name})" in err, err


def test_a_run_whose_folders_moved_resumes_in_place(tmp_path, caplog):
    _fit("--run_name=r", "--trainer.max_steps=4")
    for top in ("checkpoints", "logs"):
        (tmp_path / top / "exp" / "r").rename(tmp_path / top / "exp" / "moved")
    folder = tmp_path / "checkpoints" / "exp" / "moved"
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="attn_lightning"):
        cli = _fit("--trainer.max_steps=6", "--ckpt_path", str(folder / "last.ckpt"))
    assert sorted(p.name for p in folder.iterdir()) == ["best-step=4.ckpt", "last.ckpt"]
    assert torch.load(folder / "last.ckpt", weights_only=True)["global_step"] == 6
    assert cli.trainer.checkpoint_callback.best_model_path == str(
        Path("checkpoints") / "exp" / "moved" / "best-step=4.ckpt"
    )
    assert "exp/r/" not in caplog.text


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
