"""The GPU report's page built from the files its stages wrote (fake rows, on the CPU)."""

from __future__ import annotations

from attn_lightning.records import write_csv
from lab.benchmarks import gpu_page, gpu_targets
from lab.benchmarks.gpu_report import Result
from tests.lab.benchmarks.test_gpu_targets import H4_32K, H32_16K, auto_rows, row


def races(out, rows) -> None:
    write_csv(out / "kernels" / "race.csv", rows, {})


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
    races(tmp_path, rows)
    results = [Result("kernels", "races", "done", 12.0), Result("model", "steps", "not run")]
    write_csv(tmp_path / "stages.csv", results, {"gpu": "H100"})
    text = gpu_page.write_page(tmp_path)
    assert text == (tmp_path / "gpu_report.md").read_text()
    assert "## Per call, H 4, D 64, B·N 65,536: ms per causal fwd+bwd" in text
    assert "## Per call, H 32, D 128, B·N 16,384" in text
    assert "| fla-op: fla's chunk_linear_attn, normalize=True (the anchor) | 3 (3×) |" in text
    assert "| linear:fla: linear, fla kernel (our adapter) | 3.3 (2.7×) |" in text
    assert "not run: implementation 'triton' not available" in text
    assert "| our fla path within 1.15× of fla's op at every measured shape | worst 1.10×" in text
    assert "| linear:fla | 2x4x32768x64 |  | 4.00e-03 | 20.0 | 3.2–3.5 | 10 |" in text
    assert "| model | steps | not run |" in text and "- **gpu**: `H100`" in text
    assert text.startswith("# GPU report\n")
    assert "| 2x4x32768x64 | 24.5 | 0.98 | 25× |" in text  # the normaliser, before vs now


def test_page_prints_the_copy_bandwidth_and_each_attention_row_s_bandwidth(tmp_path):
    rows = [
        row("flash", H4_32K, 9.0),
        row("linear:triton", H4_32K, 0.35791394),
        row("linear:torch", H4_32K, None, note="OOM"),
        row("normaliser:new", H4_32K, 0.98),  # other tensors: the formula is not theirs
    ]
    races(tmp_path, rows)
    write_csv(tmp_path / "bandwidth" / "copy.csv", [{"gb_s": 3000.0}], {})
    text = gpu_page.write_page(tmp_path)
    assert "- **copy_bandwidth**: `3,000 GB/s (device-to-device copy" in text
    section = text.split("## Achieved bandwidth vs the memory roofline (copy bandwidth: 3,000")[1]
    assert "bytes moved = 8 · B·H·N·D · bytes per element" in section
    assert "| flash | 2x4x32768x64 | bfloat16 | 268.4 | 9 | 30 | 0.0895 | 100.58× |" in section
    assert "| linear:triton | 2x4x32768x64 | bfloat16 | 268.4 | 0.358 | 750 | 0.0895 | 4.00× |" in (
        section
    )
    assert "normaliser" not in section.split("##")[0] and "| linear:torch |" not in section
    assert "| triton kernel within 5× of the memory roofline at H 4 D 64 N 32,768" in text


def test_without_a_copy_bandwidth_the_rows_still_have_their_gb_s(tmp_path):
    races(tmp_path, [row("flash", H4_32K, 9.0)])
    text = gpu_page.write_page(tmp_path)
    assert "copy bandwidth: not measured" in text and "| flash | 2x4x32768x64 | bfloat16 |" in text


def test_the_page_has_the_auto_s_choice_section(tmp_path):
    races(tmp_path, auto_rows())
    text = gpu_page.write_page(tmp_path)
    section = text.split("## auto's choice: the fastest linear kernel per measured shape")[1]
    assert "more than 10% slower" in section
    broken = "| 2x4x32768x64 | bfloat16 | 4.43 | 1.77 |  | fla | torch | 2.50× | no | fla |"
    assert broken in section
    assert "| 1x32x16384x128 | bfloat16 | 11 |  | 10 | triton | torch | 1.10× | yes | torch |" in (
        section
    )
    assert "| 8x16x4096x64 | bfloat16 | 7.66 |  |  | torch | fla |  | pick not timed | torch |" in (
        section
    )
    assert gpu_targets.auto_section([row("flash", H4_32K, 1.0)]) == []
