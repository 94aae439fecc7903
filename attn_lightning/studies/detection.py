"""Run the DETR attention-site comparison over seeds and write its results table.

    python -m attn_lightning.studies.detection --variants softmax softmax_no_projections \\
        optimization_encoder_self optimization_decoder_self optimization_decoder_cross \\
        optimization_all mean --seeds 0 1 2 --jobs 2 --out docs/results/detection_runs

Each (variant, seed) is an ordinary ``train.py fit`` of ``configs/detection/base.yaml`` +
``configs/detection/<variant>.yaml`` with ``--test_after_fit`` and a metrics file; ``--jobs``
runs that many at once. Then every variant's model is built from its config (untrained weights:
cost does not depend on them) and measured in this process, one thread, batch ``--batch``, at the
config's input size: attention parameters (projections and backend tensors) and all parameters,
median forward latency per image, and peak forward memory (``benchmarks.measure.peak_bytes``).
``--skip-runs`` rebuilds the tables from the metrics files of an earlier run.

Writes ``<out>.md`` (summary + per-run table + the command) and ``<out>.csv`` (per run).
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import shlex
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
import yaml

log = logging.getLogger("attn_lightning.studies.detection")
ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "detection"
METRICS = ("test/mAP", "test/AP50", "test/AP75", "val/mAP")


def run_one(variant: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """One training subprocess; returns ``{variant, seed, status, seconds, step, **metrics}``."""
    label = f"{variant}-s{seed}"
    metrics_file = Path(args.runs_dir) / f"{label}.json"
    row: dict[str, Any] = {"variant": variant, "seed": seed}
    if not args.skip_runs:
        metrics_file.unlink(missing_ok=True)
        cmd = [
            sys.executable,
            str(ROOT / "train.py"),
            "fit",
            "--config",
            str(CONFIGS / "base.yaml"),
            "--config",
            str(CONFIGS / f"{variant}.yaml"),
            f"--seed_everything={seed}",
            f"--experiment={args.experiment}",
            f"--run_name={label}",
            f"--metrics_file={metrics_file}",
            "--test_after_fit=true",
            "--trainer.enable_progress_bar=false",
            *(f"--{item}" for item in args.set),
        ]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        row["seconds"] = time.perf_counter() - start
        if proc.returncode:
            log.warning("%s failed (exit %d):\n%s", label, proc.returncode, proc.stderr[-3000:])
    if not metrics_file.exists():
        return {**row, "status": "crashed"}
    record = json.loads(metrics_file.read_text())
    values = {**record.get("metrics", {}), **record.get("test", {})}
    row.setdefault("seconds", record.get("fit_seconds"))
    log.info("%-28s seed %d: test/mAP=%s", variant, seed, values.get("test/mAP"))
    return {
        **row,
        "status": "ok",
        "step": record.get("global_step"),
        **{k: values.get(k) for k in METRICS},
    }


def measure(variant: str, *, batch: int, repeats: int) -> dict[str, Any]:
    """Parameter counts, forward latency per image and peak forward memory of a variant."""
    from attn_lightning.benchmarks.measure import median_seconds, peak_bytes
    from attn_lightning.models.detr import attention_parameters
    from attn_lightning.tasks.detection import DetectionTask

    # The variant's model and input size from its YAML stack (later files' keys win), without
    # the CLI: only the model is needed, and with untrained weights.
    model_args: dict[str, Any] = {}
    data_args: dict[str, Any] = {}
    for path in (CONFIGS / "base.yaml", CONFIGS / f"{variant}.yaml"):
        config = yaml.safe_load(path.read_text())
        model_args.update((config.get("model") or {}).get("init_args") or {})
        data_args.update((config.get("data") or {}).get("init_args") or {})
    torch.manual_seed(0)
    model = DetectionTask(**model_args).net.eval()
    size = data_args["image_size"]
    images = torch.rand(batch, 3, size, size, generator=torch.Generator().manual_seed(0))
    cpu = torch.device("cpu")

    def forward() -> None:
        with torch.no_grad():
            model(images)

    seconds = median_seconds(forward, repeats=repeats, warmup=2, device=cpu)
    peak = peak_bytes(forward, device=cpu)
    return {
        "attention_params": attention_parameters(model),
        "total_params": sum(p.numel() for p in model.parameters()),
        "ms_per_image": 1e3 * seconds / batch,
        "peak_mib": None if peak is None else peak / 2**20,
        "input": f"{batch}×3×{size}×{size}",
    }


def _mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.3f} ± {std:.3f}"


def write(out: Path, rows: list[dict[str, Any]], costs: dict[str, dict], command: str) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    keys = ["variant", "seed", "status", "seconds", "step", *METRICS]
    with out.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        "| variant | runs ok | test mAP | test AP50 | test AP75 | attention params | total params "
        "| forward ms / image | peak forward MiB | wall s / run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for variant, cost in costs.items():
        ok = [r for r in rows if r["variant"] == variant and r["status"] == "ok"]
        col = {k: _mean_std([r[k] for r in ok if r.get(k) is not None]) for k in METRICS}
        secs = [r["seconds"] for r in ok if r.get("seconds")]
        peak = "–" if cost["peak_mib"] is None else f"{cost['peak_mib']:.1f}"
        lines.append(
            f"| `{variant}` | {len(ok)}/{sum(r['variant'] == variant for r in rows)} "
            f"| {col['test/mAP']} | {col['test/AP50']} | {col['test/AP75']} "
            f"| {cost['attention_params']:,} | {cost['total_params']:,} "
            f"| {cost['ms_per_image']:.3f} | {peak} "
            f"| {statistics.fmean(secs) if secs else float('nan'):.0f} |"
        )
    first = next(iter(costs.values()), {})
    lines += [
        "",
        f"Cost columns: one CPU thread, input {first.get('input', '?')}, eval mode, no grad.",
        "",
        "| variant | seed | status | steps | test mAP | test AP50 | test AP75 | val mAP | s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = " | ".join("–" if r.get(k) is None else f"{r[k]:.4f}" for k in METRICS)
        secs = "–" if r.get("seconds") is None else f"{r['seconds']:.0f}"
        lines.append(
            f"| `{r['variant']}` | {r['seed']} | {r['status']} | {r.get('step') or '–'} "
            f"| {cells} | {secs} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.studies.detection",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        required=True,
        help="config names under configs/detection/ (without .yaml)",
    )
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra train.py argument, e.g. trainer.max_steps=1000",
    )
    parser.add_argument("--jobs", type=int, default=1, help="training runs at once")
    parser.add_argument("--batch", type=int, default=8, help="batch of the cost measurement")
    parser.add_argument("--repeats", type=int, default=20, help="timed forward calls")
    parser.add_argument("--experiment", default="detection_report")
    parser.add_argument("--skip-runs", action="store_true", help="reuse existing metrics files")
    parser.add_argument("--out", required=True, type=Path, help="output path without extension")
    args = parser.parse_args(argv)
    missing = [v for v in args.variants if not (CONFIGS / f"{v}.yaml").is_file()]
    if missing:
        raise SystemExit(f"no config for {missing} under {CONFIGS}")
    args.runs_dir = Path("sweeps") / args.experiment
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    jobs = [(v, s) for v in args.variants for s in args.seeds]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(lambda job: run_one(*job, args), jobs))
    torch.set_num_threads(1)
    costs = {v: measure(v, batch=args.batch, repeats=args.repeats) for v in args.variants}
    write(args.out, rows, costs, "python -m attn_lightning.studies.detection " + shlex.join(argv))
    log.info("wrote %s.md and %s.csv", args.out, args.out)
    return rows


if __name__ == "__main__":
    main()
