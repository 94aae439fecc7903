"""The GPU report's page and checks on the CPU with fake rows: the targets met, not met or not
measured, per shape the fastest linear kernel and auto's 10 % rule, and the page built from the
files its stages wrote."""

from __future__ import annotations

import torch

from attn_lightning.attention.ops import dispatch
from attn_lightning.records import write_csv
from lab.benchmarks import gpu_page as page
from lab.benchmarks.contenders import Shape
from lab.benchmarks.decode import DecodeRow
from lab.benchmarks.gpu_report import Result
from lab.benchmarks.model_step import Row as StepRow
from lab.benchmarks.race import KernelRow

H4_32K, H32_16K = page.AUTO_VS_FLASH[0][0], page.AUTO_VS_FLASH[1][0]
H16_4K = Shape(8, 16, 4096, 64)


def judged(starts: str, kernels=(), steps=(), decoded=(), copy_gb_s=None) -> list[tuple]:
    """The (what, measured, verdict) targets whose text starts with ``starts``."""
    found = page.targets(kernels, steps, decoded, copy_gb_s)
    return [t for t in found if t[0].startswith(starts)]


def target(starts: str, kernels=(), steps=(), decoded=(), copy_gb_s=None) -> tuple:
    (found,) = judged(starts, kernels, steps, decoded, copy_gb_s)
    return found


def row(contender: str, shape: Shape, ms: float | None, **kwargs) -> KernelRow:
    b, h, n, d = shape.batch, shape.heads, shape.n, shape.head_dim
    return KernelRow(contender, b, h, n, d, "bfloat16", ms=ms, **kwargs)


def test_fla_path_is_judged_at_its_worst_shape():
    rows = [row("linear:fla", H4_32K, 3.3), row("fla-op", H4_32K, 3.0)]
    rows += [row("linear:fla", H32_16K, 8.0), row("fla-op", H32_16K, 7.6)]
    _, measured, verdict = target("our fla path", rows)
    assert verdict == "met" and measured.startswith("worst 1.10× at H 4 D 64 N 32,768")
    slow = target("our fla path", [*rows, row("linear:fla", H32_16K, 25.4)])  # the later row wins
    assert slow[2] == "not met" and "3.34×" in slow[1]
    assert target("our fla path", rows[:1])[2] == "not measured"


def test_auto_vs_flash_names_the_kernel_auto_took():
    rows = [row("flash", H4_32K, 9.0), row("linear:auto", H4_32K, 3.0, kernel="auto: fla")]
    rows += [row("flash", H32_16K, 14.1), row("linear:auto", H32_16K, 17.6, kernel="auto: torch")]
    at_32k, at_16k = judged("linear (auto)", rows)
    assert at_32k[2] == "met" and "3.00× (auto: fla)" in at_32k[1]
    assert at_16k[2] == "not met" and "0.80×" in at_16k[1]
    assert [t[2] for t in judged("linear (auto)", rows[:1])] == ["not measured"] * 2


def test_torch_kernel_is_judged_against_the_2026_11_28_numbers():
    before = page.TORCH_KERNEL_BEFORE
    assert list(before.values()) == [15.9, 17.4, 17.6]  # issue 48's table
    fast = [row("linear:torch", s, ms / 2.5) for s, ms in before.items()]
    assert target("torch kernel", fast)[2] == "met"
    assert target("torch kernel", fast[:2])[2] == "not measured"  # one shape missing
    one_slow = [*fast[:2], row("linear:torch", H32_16K, 10.0)]
    assert target("torch kernel", one_slow)[2] == "not met"
    assert "17.6 → 10 ms = 1.76× (N 16,384)" in target("torch kernel", one_slow)[1]


def step(backend: str, n: int, ms: float) -> StepRow:
    return StepRow("reversal", 256, 2, 4, backend, n, 65536 // n, "bfloat16", step_ms=ms)


def test_model_and_decode_targets():
    rows = [step("softmax", 4096, 10), step("linear", 4096, 12)]
    rows += [step("softmax", 8192, 20), step("linear", 8192, 15)]
    _, measured, verdict = target("reversal", steps=rows)
    assert verdict == "met" and "faster from N = 8,192" in measured
    assert target("reversal", steps=rows[:2])[2] == "not met"
    assert target("reversal")[2] == "not measured"
    decoded = [
        DecodeRow("softmax", 65536, 1, 4, 64, 6.74),
        DecodeRow("linear", 65536, 1, 4, 64, 0.47),
    ]
    assert target("decode", decoded=decoded)[2] == "met"
    assert target("decode", decoded=decoded[:1])[2] == "not measured"


def auto_rows() -> list:
    return [
        # auto took torch, 2.5x slower than fla: it breaks the rule here.
        row("linear:torch", H4_32K, 4.43),
        row("linear:fla", H4_32K, 1.77),
        row("linear:triton", H4_32K, None, note="not run: needs CUDA (a Triton kernel)"),
        row("linear:auto", H4_32K, 4.5, kernel="auto: torch"),
        # torch 9.9 % slower than triton: within the rule.
        row("linear:torch", H32_16K, 10.99),
        row("linear:triton", H32_16K, 10.0),
        row("linear:auto", H32_16K, 11.0, kernel="auto: torch"),
        # auto took fla, which was not timed here.
        row("linear:torch", H16_4K, 7.66),
        row("linear:auto", H16_4K, 7.0, kernel="auto: fla"),
        row("flash", H16_4K, 2.73),
    ]


def test_each_shape_names_the_fastest_and_judges_auto_s_pick():
    found = {c["shape"]: c for c in page.choices(auto_rows())}
    assert list(found) == [H4_32K, H32_16K, H16_4K]
    a = found[H4_32K]
    assert (a["fastest"], a["pick"], a["within"], a["should_take"]) == (
        "fla",
        "torch",
        False,
        "fla",
    )
    assert a["ms"] == {"torch": 4.43, "fla": 1.77} and round(a["ratio"], 2) == 2.5
    b = found[H32_16K]
    assert (b["fastest"], b["pick"], b["within"], b["should_take"]) == (
        "triton",
        "torch",
        True,
        "torch",
    )
    c = found[H16_4K]
    assert (c["fastest"], c["pick"], c["ratio"], c["within"]) == ("torch", "fla", None, None)


def test_just_over_ten_percent_breaks_the_rule():
    over = [row("linear:torch", H4_32K, 11.01), row("linear:triton", H4_32K, 10.0)]
    (c,) = page.choices([*over, row("linear:auto", H4_32K, 11.0, kernel="auto: torch")])
    assert c["within"] is False and c["should_take"] == "triton"


def test_without_an_auto_row_the_pick_is_choose_s(monkeypatch):
    asked = []

    def choose(implementation, device_type, dtype, *, installed):
        asked.append((implementation, device_type, dtype))
        return "triton"

    monkeypatch.setattr(dispatch, "choose", choose)
    (c,) = page.choices([row("linear:torch", H4_32K, 4.0), row("linear:triton", H4_32K, 1)])
    assert asked == [("auto", "cuda", torch.bfloat16)]
    assert (c["pick"], c["within"]) == ("triton", True)


def test_roofline_target_met_not_met_and_not_measured():
    fast = [row("linear:triton", H4_32K, 0.35791394)]
    _, measured, verdict = target("triton", fast, copy_gb_s=3000.0)
    assert verdict == "met" and "0.358 ms / 0.0895 ms roofline = 4.00×" in measured
    assert target("triton", [row("linear:triton", H4_32K, 0.5)], copy_gb_s=3000.0)[2] == "not met"
    assert target("triton", fast)[1] == "no copy bandwidth"
    absent = [row("linear:triton", H4_32K, None, note="not run: needs CUDA (a Triton kernel)")]
    _, measured, verdict = target("triton", absent, copy_gb_s=3000.0)
    assert verdict == "not measured" and measured.startswith("not run: needs CUDA")


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
    text = page.write_page(tmp_path)
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
    text = page.write_page(tmp_path)
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
    text = page.write_page(tmp_path)
    assert "copy bandwidth: not measured" in text and "| flash | 2x4x32768x64 | bfloat16 |" in text


def test_the_page_has_the_auto_s_choice_section(tmp_path):
    races(tmp_path, auto_rows())
    text = page.write_page(tmp_path)
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
    assert page.auto_section([row("flash", H4_32K, 1.0)]) == []
