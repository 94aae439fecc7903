"""Issue 48 item 4's evidence on the CPU with fake timings: per shape the fastest linear kernel,
auto's pick and whether it keeps the 10 % rule, on the page."""

from __future__ import annotations

import torch

from attn_lightning.attention.ops import dispatch
from attn_lightning.records import write_csv
from lab.benchmarks.gpu_report import auto_choice, page
from lab.benchmarks.gpu_report.calls import Shape
from tests.lab.benchmarks.gpu_report.test_targets import row

H4_32K, H32_16K, H16_4K = Shape(2, 4, 32768, 64), Shape(1, 32, 16384, 128), Shape(8, 16, 4096, 64)


def rows() -> list:
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
    found = {c.shape: c for c in auto_choice.choices(rows())}
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
    (c,) = auto_choice.choices([*over, row("linear:auto", H4_32K, 11.0, kernel="auto: torch")])
    assert c.within is False and c.should_take == "triton"


def test_without_an_auto_row_the_pick_is_choose_s(monkeypatch):
    asked = []

    def choose(implementation, device_type, dtype, *, installed):
        asked.append((implementation, device_type, dtype))
        return "triton"

    monkeypatch.setattr(dispatch, "choose", choose)
    (c,) = auto_choice.choices([row("linear:torch", H4_32K, 4.0), row("linear:triton", H4_32K, 1)])
    assert asked == [("auto", "cuda", torch.bfloat16)]
    assert (c.pick, c.within) == ("triton", True)


def test_the_page_has_the_auto_s_choice_section(tmp_path):
    write_csv(tmp_path / "kernels" / "kernels.csv", rows(), {})
    text = page.write_page(tmp_path, {}, [], dry_run=False)
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
    assert auto_choice.section([row("flash", H4_32K, 1.0)]) == []
