"""The recall report kind: the learning rate chosen on validation only, the state counted by the
model the runs trained, and one-line refusals of what it cannot read. The committed page is
rebuilt byte for byte by ``tests/docs/test_plan_pages.py``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lab.results.records import RunResult
from lab.studies.recall import chosen_lr, state_floats, write_recall, write_recall_widths

ROOT = Path(__file__).resolve().parents[3]
BASE = [str(ROOT / "configs/recall/base.yaml"), str(ROOT / "configs/presets/cpu.yaml")]


def _run(lr: float, seed: int, val: float | None, test: float) -> RunResult:
    metrics = {"test/query_acc": test, **({"val/query_acc": val} if val is not None else {})}
    return RunResult(f"softmax,lr={lr}", seed, 1.0, "ok", metrics)


def test_the_rate_is_chosen_on_validation_never_on_test():
    per_lr = {
        1e-3: [_run(1e-3, 0, 0.9, 0.1), _run(1e-3, 1, 0.7, 0.1)],  # mean val 0.8
        1e-2: [_run(1e-2, 0, 0.5, 1.0), _run(1e-2, 1, 0.6, 1.0)],  # best on test, not on val
        1e-4: [_run(1e-4, 0, None, 1.0)],  # no validation value: never chosen
    }
    assert chosen_lr({lr: per_lr[lr] for lr in (1e-3, 1e-2)}, "val/query_acc") == 1e-3
    with pytest.raises(ValueError, match=r"no seed has val/query_acc at every learning rate"):
        chosen_lr(per_lr, "val/query_acc")


def test_seeds_run_at_the_chosen_rate_alone_do_not_choose_it():
    # Seed 0 ran the grid and chose 1e-2; seeds 1 and 2 ran there only (a plan's select:).
    per_lr = {1e-3: [_run(1e-3, 0, 0.8, 0.0)]}
    per_lr[1e-2] = [_run(1e-2, 0, 0.9, 1.0), _run(1e-2, 1, 0.1, 1.0), _run(1e-2, 2, 0.1, 1.0)]
    assert chosen_lr(per_lr, "val/query_acc") == 1e-2


def test_a_tie_takes_the_smaller_rate():
    per_lr = {lr: [_run(lr, 0, 0.5, 0.5)] for lr in (1e-2, 1e-3)}
    assert chosen_lr(per_lr, "val/query_acc") == 1e-3


def test_state_is_the_trained_models_own_count():
    # softmax in layer 0 keeps its KV cache, 2 heads x 2·N·D = 2 x 2·64·32; linear elu+1 in layer 1
    # keeps F·Dv + F = 32·32 + 32 a head (d_model 64, 2 heads: D = F = 32; N = the data's 64).
    hybrid = state_floats([*BASE, str(ROOT / "configs/recall/hybrid.yaml")])
    assert hybrid == (2 * 2 * 64 * 32, 2 * (32 * 32 + 32))


def _record(root: Path, label: str, seed: int) -> None:
    folder = root / f"{label.replace(',', '_').replace('=', '-')}-s{seed}"
    folder.mkdir(parents=True)
    record = {"seed": seed, "status": "ok", "metrics": {"test": {"test/query_acc": 0.5}}}
    record["tags"] = {"study": "s", "variant": label, "seed": seed}
    (folder / "record.json").write_text(json.dumps(record))


def test_refusals_name_the_value(tmp_path):
    _record(tmp_path / "a", "softmax", 0)
    label = re.escape("'softmax': expected a label '<overlay>,lr=<lr>'")
    with pytest.raises(ValueError, match=label):
        write_recall([tmp_path / "a"], tmp_path / "p", command="c", configs=BASE, overlays="x")
    _record(tmp_path / "b", "nowhere,lr=0.01", 0)
    overlay = re.escape("variant 'nowhere': no overlay x/nowhere.yaml")
    with pytest.raises(FileNotFoundError, match=overlay):
        write_recall([tmp_path / "b"], tmp_path / "p", command="c", configs=BASE, overlays="x")


def _graded(root: Path, label: str, seed: int, val: float, test: float) -> None:
    _record(root, label, seed)
    record_file = root / f"{label.replace(',', '_').replace('=', '-')}-s{seed}" / "record.json"
    record = json.loads(record_file.read_text())
    record["metrics"] = {"fit": {"val/query_acc": val}, "test": {"test/query_acc": test}}
    record_file.write_text(json.dumps(record))


def test_widths_page_chooses_each_widths_rate_on_its_own_validation(tmp_path):
    # Width 64: linear's validation picks 1e-3 (test 0.25); width 128 picks 1e-2 (test 0.3).
    for lr, val, test in ((1e-3, 0.4, 0.25), (1e-2, 0.3, 0.9)):
        _graded(tmp_path / "w64", f"linear,lr={lr}", 0, val, test)
    for lr, val, test in ((1e-3, 0.2, 0.9), (1e-2, 0.5, 0.3)):
        _graded(tmp_path / "w128", f"linear,lr={lr}", 0, val, test)
    _graded(tmp_path / "w128", "softmax,lr=0.01", 0, 1.0, 1.0)  # at one width only: still a row
    widths = {64: BASE, 128: [BASE[0], str(ROOT / "configs/recall/width128.yaml"), BASE[1]]}
    roots = [tmp_path / "w64", tmp_path / "w128"]
    overlays = str(ROOT / "configs/recall")
    page, csv, figure = write_recall_widths(
        roots, tmp_path / "p", command="c", widths=widths, overlays=overlays
    )
    rows = [line.split(" | ") for line in page.read_text().splitlines() if line.startswith("| `")]
    # linear first (the smaller state), through its widths; elu+1 keeps F·Dv + F a head, 2 layers.
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        ("| `linear`", "64", f"{2 * 2 * (32 * 32 + 32):,}", "0.001"),
        ("| `linear`", "128", f"{2 * 2 * (64 * 64 + 64):,}", "0.01"),
        ("| `softmax`", "128", f"{2 * 2 * 2 * 64 * 64:,}", "0.01"),
    ]
    assert [r[-1] for r in rows] == ["0.250 |", "0.300 |", "1.000 |"]
    assert csv.is_file() and figure.stat().st_size > 0
    with pytest.raises(ValueError, match=r"one records folder per width, in the order of widths"):
        write_recall_widths(roots[:1], tmp_path / "p", command="c", widths=widths, overlays="x")
