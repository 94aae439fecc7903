"""``benchmark generation``: throughput of random models and trained checkpoints, its ratio
columns, checkpoint errors, the histogram baseline, the paper's numbers read from their reference
file."""

from __future__ import annotations

from pathlib import Path

import lightning.pytorch as pl
import pytest
import torch

from attn_lightning.cli.checkpoints import CheckpointError
from attn_lightning.data.pixels import PixelDataModule
from attn_lightning.records import read_csv, write_csv
from attn_lightning.tasks.image import ImageGenerationTask
from lab.benchmark import build_parser
from lab.benchmark import main as benchmark_main
from lab.benchmarks import generation
from lab.benchmarks import throughput as throughput_report
from lab.benchmarks.throughput import largest_batch
from lab.results.references import ENV

TINY = {
    "image_size": 4,
    "levels": 16,
    "net": {"d_model": 16, "num_heads": 2, "num_layers": 1, "d_ff": 32},
}
# A random model small enough to sample in a blink, in the old underscore spellings.
RANDOM = ["--image_size", "2", "--levels", "4", "--d_model", "8", "--num_heads", "2"]
RANDOM += ["--num_layers", "1", "--d_ff", "8", "--batch", "1"]


def main(argv: list[str]) -> int:
    """The new spelling: ``python -m lab.benchmark generation ...``."""
    return benchmark_main(["generation", *argv])


def _rows(out: Path) -> list[dict[str, str]]:
    return read_csv(out.with_suffix(".csv"))[1]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """Two trained (2 steps) 4×4 checkpoints, softmax and linear, saved by Lightning."""
    root = tmp_path_factory.mktemp("ckpt")
    paths = {}
    for name in ("softmax", "linear"):
        pl.seed_everything(0)
        task = ImageGenerationTask(attention={"name": name}, warmup_steps=0, **TINY)
        data = PixelDataModule(image_size=4, levels=16, batch_size=8)
        trainer = pl.Trainer(
            max_steps=2,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=0,
        )
        trainer.fit(task, data)
        paths[name] = root / f"{name}-s0" / "last.ckpt"
        trainer.save_checkpoint(paths[name])
    return paths


def test_checkpoint_mode_times_trained_weights_with_ratios(checkpoints, tmp_path):
    out = tmp_path / "trained"
    main(
        [
            "--checkpoints",
            str(checkpoints["softmax"]),
            str(checkpoints["linear"]),
            "--batches",
            "1",
            "2",
            "--repeats",
            "3",
            "--out",
            str(out),
        ]
    )
    rows = _rows(out)
    # The rate comes from the best of the repeats; the median of the same repeats is kept.
    assert all(r["repeats"] == "3" for r in rows)
    assert all(float(r["seconds"]) <= float(r["seconds_median"]) for r in rows)
    got = [(r["backend"], r["run"], r["method"], r["batch"]) for r in rows]
    assert got == [
        ("softmax", "softmax-s0", "step", "1"),
        ("softmax", "softmax-s0", "recompute", "1"),
        ("softmax", "softmax-s0", "step", "2"),
        ("softmax", "softmax-s0", "recompute", "2"),
        ("linear", "linear-s0", "step", "1"),
        ("linear", "linear-s0", "step", "2"),
    ]
    assert {r["train_step"] for r in rows} == {"2"}
    assert all(r["tokens"] == "16" and float(r["images_per_s"]) > 0 for r in rows)
    by = {(r["backend"], r["method"], r["batch"]): float(r["images_per_s"]) for r in rows}
    for row in rows:  # each against softmax at the same batch
        speed, batch = float(row["images_per_s"]), row["batch"]
        cached = by[("softmax", "step", batch)]
        uncached = by[("softmax", "recompute", batch)]
        assert float(row["vs_softmax_kv_cache"]) == pytest.approx(speed / cached, abs=0.006)
        assert float(row["vs_softmax_recompute"]) == pytest.approx(speed / uncached, abs=0.006)
    assert rows[0]["vs_softmax_kv_cache"] == "1.0" and rows[1]["vs_softmax_recompute"] == "1.0"
    md = out.with_suffix(".md").read_text()
    assert "317×" in md and "19×" in md and "| `linear` | linear-s0 | 2 | step" in md
    assert "image_size=4 levels=16 d_model=16" in md


def test_checkpoint_mode_recompute_by_run_and_max_batch(checkpoints, tmp_path):
    out = tmp_path / "max"
    args = ["--checkpoints", str(checkpoints["linear"]), "--recompute", "linear-s0"]
    main([*args, "--batches", "max", "--max-batch-limit", "64", "--out", str(out)])
    rows = _rows(out)
    assert [(r["method"], r["requested_batch"], r["batch"]) for r in rows] == [
        ("step", "max", "64"),  # a 4×4 image needs far less than 8 GB: the limit binds
        ("recompute", "max", "64"),
    ]
    assert rows[0]["vs_softmax_kv_cache"] == ""  # no softmax checkpoint given
    assert "max → 64" in out.with_suffix(".md").read_text()
    model, _ = generation.load_pixel_model(checkpoints["linear"])
    tiny = largest_batch(
        model, method="step", device=torch.device("cpu"), budget_bytes=1.0, limit=64
    )
    assert tiny == 1


def test_random_models_keep_their_columns(tmp_path):
    out = tmp_path / "random"
    sizes = ["--image-size", "3", "--levels", "8", "--d-model", "8", "--num-heads", "2"]
    sizes += ["--num-layers", "1", "--d-ff", "16", "--batch", "2"]
    main(["--backends", "softmax", "linear", "--recompute", "softmax", *sizes,
                     "--out", str(out)])  # fmt: skip
    rows = _rows(out)
    assert [(r["backend"], r["method"]) for r in rows] == [
        ("softmax", "step"),
        ("linear", "step"),
        ("softmax", "recompute"),
    ]
    assert rows[0]["vs_softmax_kv_cache"] == "1.0" and rows[2]["vs_softmax_recompute"] == "1.0"
    assert (
        "| `linear` | step (recurrent / KV cache) | 2 | 9 |" in out.with_suffix(".md").read_text()
    )


def test_missing_corrupt_and_foreign_checkpoints_name_the_path(checkpoints, tmp_path, capsys):
    missing = tmp_path / "nope" / "last.ckpt"
    with pytest.raises(CheckpointError, match=rf"--checkpoints '{missing}': no such file"):
        generation.load_pixel_model(missing)
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"\x00not a checkpoint" * 10)
    with pytest.raises(SystemExit) as exit_info:  # one line on the command line, no traceback
        out = tmp_path / "out"
        main(["--checkpoints", str(checkpoints["linear"]), str(corrupt), "--out", str(out)])
    assert exit_info.value.code == 2
    assert f"error: --checkpoints '{corrupt}' is corrupt" in capsys.readouterr().err
    assert not out.with_suffix(".csv").exists()  # nothing timed before the bad path was seen
    state = torch.load(checkpoints["linear"], weights_only=True)
    foreign = tmp_path / "reversal.ckpt"
    saved = {"_class_path": "attn_lightning.tasks.SequenceReversalTask", "num_symbols": 10}
    torch.save({**state, "hyper_parameters": saved}, foreign)
    with pytest.raises(
        CheckpointError,
        match=r"not an image-generation checkpoint \(its task is .*SequenceReversalTask\)",
    ):
        generation.load_pixel_model(foreign)
    unnamed = tmp_path / "unnamed.ckpt"  # no class path saved (plain Trainer): checked by build
    torch.save({"state_dict": {}, "hyper_parameters": {"num_symbols": 10}}, unnamed)
    with pytest.raises(CheckpointError, match=rf"'{unnamed}' is not an image-generation"):
        generation.load_pixel_model(unnamed)


def test_format_attention_spec_inverts_the_parser():
    spec = {"name": "performer", "num_features": 64, "redraw": True, "eps": None}
    assert (
        generation.format_attention_spec(spec) == "performer:num_features=64,redraw=true,eps=none"
    )
    assert generation.format_attention_spec({"name": "linear"}) == "linear"


def test_histogram_command_reproduces_the_8x8_baseline(capsys):
    main(["--histogram", "--image-size", "8", "--levels", "256"])
    printed = capsys.readouterr().out
    assert "2.4377 bits/dim on all 64 pixels" in printed  # docs/results/image_completion.md
    assert "held-out pixels i >= 24" in printed


def test_recompute_max_batch_leaves_out_only_the_larger_recompute(checkpoints, tmp_path):
    out = tmp_path / "capped"
    args = ["--checkpoints", str(checkpoints["softmax"]), "--batches", "1", "2"]
    main([*args, "--recompute-max-batch", "1", "--out", str(out)])
    rows = _rows(out)
    assert [(r["method"], r["batch"]) for r in rows] == [
        ("step", "1"),
        ("recompute", "1"),
        ("step", "2"),
    ]
    assert rows[2]["vs_softmax_recompute"] == ""  # nothing uncached to compare with at batch 2


def test_new_spelling_parses_the_old_underscore_flags_too():
    parser = build_parser()
    dashed = parser.parse_args(["generation", "--image-size", "3", "--d-model", "8", "--d-ff", "8"])
    underscored = parser.parse_args(["generation", *RANDOM[:2], "--d_model", "8", "--d_ff", "8"])
    assert vars(dashed) == vars(underscored) | {"image_size": 3}
    assert (dashed.command, dashed.image_size, dashed.d_model, dashed.batches) == (
        "generation",
        3,
        8,
        ["1", "32"],
    )


def test_the_papers_numbers_are_read_from_their_reference_file(tmp_path, monkeypatch):
    text = throughput_report.paper_context()
    assert "arXiv 2006.16236" in text and "8 layers, 8 heads × 32" in text
    assert "softmax 0.45, softmax with KV cache 7.56, linear 142.8" in text
    assert "linear **317×** uncached and **19×** cached" in text
    assert "linear **13×** uncached and **1.35×** cached" in text
    rows = [
        {"setting": "on a toy", "backend": "softmax", "decoding": "recompute", "label": "sm"}
        | {"value": "1", "unit": "images/s"},
        {"setting": "on a toy", "backend": "softmax", "decoding": "kv_cache", "label": "kv"}
        | {"value": "2", "unit": "images/s"},
        {"setting": "on a toy", "backend": "linear", "decoding": "recurrent", "label": "lin"}
        | {"value": "5", "unit": "images/s"},
    ]
    write_csv(tmp_path / "toy.csv", rows, {"source": "a toy paper", "model": "tiny"})
    monkeypatch.setenv(ENV, str(tmp_path))
    assert throughput_report.paper_context("toy") == (
        "a toy paper; tiny: on a toy sm 1, kv 2, lin 5, i.e. linear **5×** uncached and "
        "**2.5×** cached softmax."
    )


def test_backends_and_checkpoints_together_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--backends", "softmax", "--checkpoints", "x.ckpt"])
    assert exit_info.value.code == 2
    assert "generation: error: give --backends" in capsys.readouterr().err


def test_decode_plot_from_the_decode_benchmark_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where the default --out would land
    decode = ["decode", "--contexts", "4", "8", "--batch", "1", "--heads", "1", "--head-dim", "4"]
    decode += ["--backends", "linear", "--repeats", "1", "--warmup", "0", "--device", "cpu"]
    assert benchmark_main([*decode, "--out", str(tmp_path), "--tag", "dec"]) == 0
    png = tmp_path / "figures" / "decode.png"
    assert main(["--decode-csv", str(tmp_path / "dec.csv"), "--decode_png", str(png)]) == 0
    assert png.stat().st_size > 0
    assert not (tmp_path / "out").exists()  # a plot only: no throughput timed or written


def test_ratios_divide_the_measured_rates_not_the_rounded_ones(tmp_path):
    # The committed image28 case: softmax's recompute 24.785 s per image (0.0403 images/s, which
    # rounded to 3 decimals is 0.04) against linear's step 1.151 s: 21.53x, not 0.869 / 0.04.
    from argparse import Namespace

    from lab.benchmarks.throughput import _row

    facts = {"run": "r", "train_step": 1, "model": "m", "requested_batch": 1}
    rows = [
        {**_row("softmax", "recompute", 1, 784, [24.785, 25.9]), **facts, "checkpoint": "s"},
        {**_row("softmax", "step", 1, 784, [0.841]), **facts, "checkpoint": "s"},
        {**_row("linear", "step", 1, 784, [1.151, 1.201]), **facts, "checkpoint": "l"},
    ]
    out = tmp_path / "gen"
    throughput_report.write_throughput(rows, out, "cmd", Namespace(device="cpu", repeats=2))
    _, written = read_csv(out.with_suffix(".csv"))
    assert written[0]["images_per_s"] == "0.04035"  # 4 significant figures, not 0.04
    assert written[2]["vs_softmax_recompute"] == "21.53"  # 24.785 / 1.151
    assert written[2]["vs_softmax_kv_cache"] == "0.73"
    assert (written[2]["seconds"], written[2]["seconds_median"]) == ("1.151", "1.176")
