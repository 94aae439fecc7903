"""The GPU report's checks judged from rows on the CPU with fake timings: the targets met, not
met or not measured, and per shape the fastest linear kernel, auto's pick and its 10 % rule."""

from __future__ import annotations

import torch

from attn_lightning.attention.ops import dispatch
from lab.benchmarks import gpu_targets as targets
from lab.benchmarks.contenders import Shape
from lab.benchmarks.decode import DecodeRow
from lab.benchmarks.model_step import Row as StepRow
from lab.benchmarks.race import KernelRow

H4_32K, H32_16K = targets.AUTO_VS_FLASH[0][0], targets.AUTO_VS_FLASH[1][0]
H16_4K = Shape(8, 16, 4096, 64)


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
    found = {c.shape: c for c in targets.choices(auto_rows())}
    assert list(found) == [H4_32K, H32_16K, H16_4K]
    a = found[H4_32K]
    assert (a.fastest, a.pick, a.within, a.should_take) == ("fla", "torch", False, "fla")
    assert a.ms == {"torch": 4.43, "fla": 1.77} and round(a.ratio, 2) == 2.5
    b = found[H32_16K]
    assert (b.fastest, b.pick, b.within, b.should_take) == ("triton", "torch", True, "torch")
    c = found[H16_4K]
    assert (c.fastest, c.pick, c.pick_ms, c.within) == ("torch", "fla", None, None)


def test_just_over_ten_percent_breaks_the_rule():
    over = [row("linear:torch", H4_32K, 11.01), row("linear:triton", H4_32K, 10.0)]
    (c,) = targets.choices([*over, row("linear:auto", H4_32K, 11.0, kernel="auto: torch")])
    assert c.within is False and c.should_take == "triton"


def test_without_an_auto_row_the_pick_is_choose_s(monkeypatch):
    asked = []

    def choose(implementation, device_type, dtype, *, installed):
        asked.append((implementation, device_type, dtype))
        return "triton"

    monkeypatch.setattr(dispatch, "choose", choose)
    (c,) = targets.choices([row("linear:torch", H4_32K, 4.0), row("linear:triton", H4_32K, 1)])
    assert asked == [("auto", "cuda", torch.bfloat16)]
    assert (c.pick, c.within) == ("triton", True)


def test_roofline_target_met_not_met_and_not_measured():
    fast = [row("linear:triton", H4_32K, 0.35791394)]
    assert targets.roofline(fast, 3000.0).verdict == "met"
    assert "0.358 ms / 0.0895 ms roofline = 4.00×" in targets.roofline(fast, 3000.0).measured
    slow = [row("linear:triton", H4_32K, 0.5)]
    assert targets.roofline(slow, 3000.0).verdict == "not met"
    assert targets.roofline(fast, None).measured == "no copy bandwidth"
    absent = [row("linear:triton", H4_32K, None, note="not run: needs CUDA (a Triton kernel)")]
    found = targets.roofline(absent, 3000.0)
    assert found.verdict == "not measured" and found.measured.startswith("not run: needs CUDA")
