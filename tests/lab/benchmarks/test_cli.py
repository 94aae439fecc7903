"""Every subcommand runs on tiny sizes and writes its files (no timing is asserted)."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest
import torch

from lab.benchmark import build_parser, main
from lab.benchmarks.cli import COMMANDS
from lab.benchmarks.flop_count import CallShape
from lab.benchmarks.flops import attention_flops
from lab.benchmarks.report import read_csv

TINY = ["--repeats", "1", "--warmup", "1", "--matmul-size", "64", "--device", "cpu"]


def _run(capsys, command: str, *more: str) -> str:
    """``python -m lab.benchmark <command> <more>`` in-process: its stdout."""
    assert main([*command.split(" "), *more]) == 0
    return capsys.readouterr().out


def test_latency_fixed_batch_writes_csv_markdown_and_plots(tmp_path, capsys):
    out = _run(
        capsys,
        (
            "latency --protocol fixed-batch --batch 2 --head-dim 8 --lengths 16 32 "
            "--backends softmax linear optimization --out"
        ),
        str(tmp_path),
        "--tag",
        "fb",
        *TINY,
    )
    assert "| softmax | full |" in out and "peak memory" in out
    names = {p.name for p in tmp_path.iterdir()}
    assert names == {
        "fb.csv",
        "fb.md",
        "fb_time.png",
        "fb_memory.png",
        "fb_speedup.png",
        "fb_flops.png",
    }
    meta, rows = read_csv(tmp_path / "fb.csv")
    assert meta["protocol"].startswith("fixed-batch: B=2, H=1, D=8")
    assert "profiler" in meta["memory_measure"] and "torch" in meta["versions"]
    # softmax and linear: 2 masks × 2 modes × 2 N; optimization has no causal form.
    assert len(rows) == 8 + 8 + 4
    assert all(r["ms"] and r["peak_mb"] for r in rows)
    assert {r["causal"] for r in rows if r["backend"] == "optimization"} == {"False"}
    assert "fixed-batch" in (tmp_path / "fb.md").read_text()


def test_latency_runs_optimization_and_pool_non_causal_with_counted_flops(tmp_path, capsys):
    out = _run(
        capsys,
        (
            "latency --batch 1 --heads 2 --head-dim 8 --lengths 16 32 --backends softmax "
            "optimization pool mean --causal both --modes fwd --no-plots --out"
        ),
        str(tmp_path),
        "--tag",
        "opt",
        *TINY,
    )
    assert "No causal form, so no causal rows (left out, not failed): optimization, pool." in out
    assert "`pool`: self-attention only (L = S)" in out and "(R = 0" in out
    assert "## forward FLOPs per call" in out
    _, rows = read_csv(tmp_path / "opt.csv")
    causal = {(r["backend"], r["causal"]) for r in rows}
    assert causal == {
        ("softmax", "False"),
        ("softmax", "True"),
        ("optimization", "False"),
        ("pool", "False"),
        ("mean", "False"),
        ("mean", "True"),
    }
    assert all(r["ms"] and r["peak_mb"] and int(r["fwd_flops"]) > 0 for r in rows)
    for r in rows:
        shape = CallShape.self_attention(batch=1, heads=2, n=int(r["n"]), head_dim=8)
        count = attention_flops(r["backend"], shape, causal=r["causal"] == "True")
        assert count is not None and int(r["fwd_flops"]) == count.total
    # Markdown: the counted FLOPs with the rate achieved in the forward timing.
    flops_md = out.split("## forward FLOPs per call")[1]
    assert "| optimization | full |" in flops_md and "GF/s]" in flops_md


def test_latency_causal_only_skips_backends_without_a_causal_form(tmp_path, capsys):
    out = _run(
        capsys,
        (
            "latency --batch 1 --heads 1 --head-dim 8 --lengths 16 --backends optimization "
            "pool --causal causal --out"
        ),
        str(tmp_path),
        *TINY,
    )
    assert "no causal rows (left out, not failed): optimization, pool" in out
    _, rows = read_csv(tmp_path / "scaling_small-batch_cpu_float32.csv")
    assert rows == []
    assert not any(p.suffix == ".png" for p in tmp_path.iterdir())  # nothing to draw


def test_latency_constant_tokens_per_sample_and_skips(tmp_path, capsys):
    out = _run(
        capsys,
        (
            "latency --protocol constant-tokens --tokens 64 --head-dim 8 --lengths 16 32 64 "
            "--backends softmax performer:num_features=8 --causal causal --modes fwd "
            "--budget 0 --no-memory --no-plots --out"
        ),
        str(tmp_path),
        *TINY,
    )
    assert "ms per sample" in out and "too slow" in out
    _, rows = read_csv(tmp_path / "scaling_constant-tokens_cpu_float32.csv")
    assert [int(r["batch"]) for r in rows[:3]] == [4, 2, 1]
    assert rows[1]["ms"] == "" and float(rows[1]["est_ms"]) > 0
    assert not any(p.suffix == ".png" for p in tmp_path.iterdir())


def test_latency_bfloat16_runs(tmp_path, capsys):
    _run(
        capsys,
        (
            "latency --lengths 16 --batch 1 --heads 1 --head-dim 8 --backends softmax "
            "linear --dtype bfloat16 --no-plots --out"
        ),
        str(tmp_path),
        *TINY,
    )
    _, rows = read_csv(tmp_path / "scaling_small-batch_cpu_bfloat16.csv")
    assert rows and all(r["ms"] and r["dtype"] == "bfloat16" for r in rows)


def test_decode_writes_table(tmp_path, capsys):
    out = _run(
        capsys,
        (
            "decode --contexts 8 16 --batch 1 --heads 1 --head-dim 8 --backends softmax "
            "linear optimization --repeats 1 --warmup 0 --out"
        ),
        str(tmp_path),
    )
    assert "T=16" in out
    _, rows = read_csv(tmp_path / "decode_cpu.csv")
    assert {r["backend"] for r in rows} == {"softmax", "linear"}  # optimization has no step()


def test_approx_writes_tables_and_one_figure_per_experiment(tmp_path, capsys):
    out = _run(
        capsys,
        (
            "approx --features 4 8 --stds 0.5 --sketch-sizes 2 --degrees 2 --draws 2 "
            "--length 8 --heads 1 --head-dim 4 --std 0.5 1 --out"
        ),
        str(tmp_path),
    )
    assert "trigonometric/iid σ=0.5" in out and "### degree" in out
    expected = {f"approximation_{e}.png" for e in ("performer", "scale", "sketch", "degree")}
    assert expected | {"approximation.csv", "approximation.md"} == {
        p.name for p in tmp_path.iterdir()
    }
    meta, rows = read_csv(tmp_path / "approximation.csv")
    # performer 3 kernels × 2 projections × 2 m × 2 σ; scale 6 backends; sketch 2 references ×
    # 2 σ; degree 2 forms × 2 σ.
    assert meta["dtype"] == "float64" and len(rows) == 24 + 6 + 4 + 4
    assert all(float(r["mean"]) >= 0 and r["draws"] == "2" for r in rows)


def test_kernels_reads_learned_coefficients_from_checkpoint(tmp_path, capsys):
    ckpt = tmp_path / "model.ckpt"
    logits = torch.log(torch.expm1(torch.tensor([1.0, 1.0, 0.5])))  # a = 1, 1, 0.5
    even = torch.log(torch.expm1(torch.tensor([1.0, 2.0])))  # linear-time form: a0 = 1, a2 = 2
    state = {
        "model.layer.attention.coefficient_logits": logits,
        "model.other.backend.even_coefficient_logits": even,
    }
    torch.save({"state_dict": state}, ckpt)
    out = _run(
        capsys,
        "kernels --checkpoint",
        str(ckpt),
        "--pairs",
        "4",
        "--head-dim",
        "8",
        "--out",
        str(tmp_path),
    )
    assert "learned polynomial: model.layer.attention" in out
    meta, rows = read_csv(tmp_path / "kernel_shapes.csv")
    assert meta["checkpoint"] == str(ckpt)
    learned = [float(r["learned polynomial: model.layer.attention"]) for r in rows]
    # (1 + d + d²/2) / 2.5 at d = cos θ: 1 at 0°, 0.2 at 180°.
    assert learned[0] == pytest.approx(1.0) and learned[-1] == pytest.approx(0.2)
    # (1 + 2d²) / 3: symmetric, 1/3 at 90°.
    even_col = "learned polynomial: model.other.backend (linear-time, even)"
    even_curve = [float(r[even_col]) for r in rows]
    assert even_curve[-1] == pytest.approx(1.0) and min(even_curve) == pytest.approx(
        1 / 3, rel=1e-2
    )
    assert "## learned coefficients" in out and "| model.layer.attention | 1 | 1 | 0.5 |" in out
    assert (tmp_path / "kernel_shapes.png").stat().st_size > 0


@pytest.mark.parametrize("content", [None, b"hello", b"", "pickled", "no coefficients"])
def test_kernels_with_an_unusable_checkpoint_is_one_line(content, tmp_path, capsys):
    # Was a traceback, relaying torch's advice to re-run with weights_only=False.
    path = tmp_path / "x.ckpt"
    if content == "pickled":
        torch.save({"state_dict": {}, "x": argparse.Namespace()}, path)
    elif content == "no coefficients":
        torch.save({"state_dict": {"w": torch.zeros(2)}}, path)
    elif content is not None:
        path.write_bytes(content)
    with pytest.raises(SystemExit) as exc:
        main(["kernels", "--checkpoint", str(path), "--out", str(tmp_path / "o")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "kernels: error: " in err, err
    assert "weights_only" not in err


def test_kernels_without_checkpoint_says_so(tmp_path, capsys):
    out = _run(capsys, "kernels --pairs 4 --head-dim 8 --out", str(tmp_path))
    assert "1/i! initialisation, p=4 (no checkpoint)" in out


def test_unknown_backend_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["latency", "--backends", "softmax", "flashy"])
    assert exc.value.code == 2
    assert "unknown backend 'flashy'" in capsys.readouterr().err


def test_module_entry_point():
    result = subprocess.run(
        [sys.executable, "-m", "lab.benchmark", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "latency" in result.stdout and "kernels" in result.stdout
    assert "generation" in result.stdout


def test_the_subcommands_are_the_rows_of_the_command_table():
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)
    assert list(COMMANDS) == [
        "latency",
        "decode",
        "approx",
        "kernels",
        "learned",
        "model",
        "generation",
        "triton-static",
        "race",
        "profile",
        "bandwidth",
    ]
    for name, command in COMMANDS.items():  # each row's own flags reach its subparser
        flags = {s for a in sub.choices[name]._actions for s in a.option_strings}
        probe = argparse.ArgumentParser()
        command.add_arguments(probe)
        assert flags == {s for a in probe._actions for s in a.option_strings}, name
