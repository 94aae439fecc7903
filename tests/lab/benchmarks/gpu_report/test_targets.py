"""Issue 48's targets judged from rows, and the page written from the stages' files."""

from __future__ import annotations

from attn_lightning.records import write_csv
from lab.benchmarks.decode import DecodeRow
from lab.benchmarks.gpu_report import page, targets
from lab.benchmarks.gpu_report.calls import Shape
from lab.benchmarks.gpu_report.kernels import KernelRow
from lab.benchmarks.gpu_report.runner import StageResult
from lab.benchmarks.model_step import Row as StepRow

H4_32K, H32_16K = targets.AUTO_VS_FLASH[0][0], targets.AUTO_VS_FLASH[1][0]


def row(contender: str, shape: Shape, ms: float | None, **kwargs) -> KernelRow:
    b, h, n, d = shape.batch, shape.heads, shape.n, shape.head_dim
    return KernelRow(contender, b, h, n, d, "bfloat16", ms=ms, **kwargs)


def test_fla_path_is_judged_at_its_worst_shape():
    rows = [row("linear:fla", H4_32K, 3.3), row("fla-op", H4_32K, 3.0)]
    rows += [row("linear:fla", H32_16K, 8.0), row("fla-op", H32_16K, 7.6)]
    found = targets.fla_path(rows)
    assert found.verdict == "met" and found.measured.startswith("worst 1.10× at H 4 D 64 N 32,768")
    slow = targets.fla_path([*rows, row("linear:fla", H32_16K, 25.4)])  # the later row wins
    assert slow.verdict == "not met" and "3.34×" in slow.measured
    assert targets.fla_path(rows[:1]).verdict == "not measured"


def test_auto_vs_flash_names_the_kernel_auto_took():
    rows = [row("flash", H4_32K, 9.0), row("linear:auto", H4_32K, 3.0, kernel="auto: fla")]
    rows += [row("flash", H32_16K, 14.1), row("linear:auto", H32_16K, 17.6, kernel="auto: torch")]
    at_32k, at_16k = targets.auto_vs_flash(rows)
    assert at_32k.verdict == "met" and "3.00× (auto: fla)" in at_32k.measured
    assert at_16k.verdict == "not met" and "0.80×" in at_16k.measured
    assert [t.verdict for t in targets.auto_vs_flash(rows[:1])] == ["not measured"] * 2


def test_torch_kernel_is_judged_against_the_2026_11_28_numbers():
    before = targets.TORCH_KERNEL_BEFORE
    assert list(before.values()) == [15.9, 17.4, 17.6]  # issue 48's table
    fast = [row("linear:torch", s, ms / 2.5) for s, ms in before.items()]
    assert targets.torch_kernel(fast).verdict == "met"
    assert targets.torch_kernel(fast[:2]).verdict == "not measured"  # one shape missing
    one_slow = [*fast[:2], row("linear:torch", H32_16K, 10.0)]
    assert targets.torch_kernel(one_slow).verdict == "not met"
    assert "17.6 → 10 ms = 1.76× (N 16,384)" in targets.torch_kernel(one_slow).measured


def step(backend: str, n: int, ms: float) -> StepRow:
    return StepRow("reversal", 256, 2, 4, backend, n, 65536 // n, "bfloat16", step_ms=ms)


def test_model_and_decode_targets():
    rows = [step("softmax", 4096, 10), step("linear", 4096, 12)]
    rows += [step("softmax", 8192, 20), step("linear", 8192, 15)]
    assert targets.model(rows).verdict == "met"
    assert "faster from N = 8,192" in targets.model(rows).measured
    assert targets.model(rows[:2]).verdict == "not met"
    assert targets.model([]).verdict == "not measured"
    decoded = [
        DecodeRow("softmax", 65536, 1, 4, 64, 6.74),
        DecodeRow("linear", 65536, 1, 4, 64, 0.47),
    ]
    assert targets.decode_step(decoded).verdict == "met"
    assert targets.decode_step(decoded[:1]).verdict == "not measured"


def test_page_puts_the_anchor_beside_the_linear_rows_per_regime(tmp_path):
    rows = [
        row("flash", H4_32K, 9.0),
        row("fla-op", H4_32K, 3.0),
        row(
            "linear:fla",
            H4_32K,
            3.3,
            rel_err=4e-3,
            first_ms=20e3,
            min_ms=3.2,
            max_ms=3.5,
            repeats=10,
        ),
        row("linear:triton", H4_32K, None, note="not run: implementation 'triton' not available"),
        row("flash", H32_16K, 14.1),
        row("normaliser:old", H4_32K, 24.5),
        row("normaliser:new", H4_32K, 0.98),
    ]
    write_csv(tmp_path / "kernels" / "kernels.csv", rows, {})
    results = [
        StageResult("kernels", "races", "done", 12.0),
        StageResult("model", "steps", "pending"),
    ]
    text = page.write_page(tmp_path, {"gpu": "H100"}, results, dry_run=False)
    assert text == (tmp_path / "gpu_report.md").read_text()
    assert "## Per call, H 4, D 64, B·N 65,536: ms per causal fwd+bwd" in text
    assert "## Per call, H 32, D 128, B·N 16,384" in text
    assert "| fla-op: fla's chunk_linear_attn, normalize=True (the anchor) | 3 (3×) |" in text
    assert "| linear:fla: linear, fla kernel (our adapter) | 3.3 (2.7×) |" in text
    assert "not run: implementation 'triton' not available" in text
    assert "| our fla path within 1.15× of fla's op at every measured shape | worst 1.10×" in text
    assert "| linear:fla | 2x4x32768x64 |  | 4.00e-03 | 20.0 | 3.2–3.5 | 10 |" in text
    assert "| model | steps | pending |" in text
    assert "| 2x4x32768x64 | 24.5 | 0.98 | 25× |" in text  # the normaliser, before vs now
