"""Repeat a config over attention backends and seeds; tabulate mean ± std.

    python -m attn_lightning.studies.sweep --config configs/reversal/base.yaml \\
        --backends softmax linear performer:num_features=64 polynomial:form=sketch \\
        --seeds 0 1 2 --set trainer.max_steps=3000 --out docs/results/reversal_len50

Each (backend, seed) is an ordinary ``train.py fit`` subprocess, run one after another, with
``--test_after_fit`` and a ``--metrics_file`` that this module reads back. A backend is
``name[:key=value,...]`` (values parsed as YAML), e.g. ``polynomial:form=sketch,sketch_size=64``.
``--seeds`` sets ``seed_everything`` (model init, batch order, random features); the data seed
stays the config's, so seeds measure training variance on one dataset.

Writes ``<out>.md`` (summary + per-run tables + the command), ``<out>.csv`` (summary) and
``<out>_runs.csv`` (one row per run). A run "fails to converge" when ``--metric`` (default
``test/token_acc``) is below ``--threshold``; a run that crashes or times out is counted apart.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import platform
import shlex
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attn_lightning.attention import parse_attention_spec

log = logging.getLogger("attn_lightning.studies.sweep")
# (title, metric, scale, decimals) of the summary table; greedy = decoded with generate().
COLUMNS = (
    ("token acc (%)", "test/token_acc", 100, 2),
    ("exact-seq acc (%)", "test/exact_acc", 100, 2),
    ("greedy token acc (%)", "test/gen_token_acc", 100, 2),
    ("greedy exact-seq (%)", "test/gen_exact_acc", 100, 2),
    ("test loss", "test/loss", 1, 4),
)
REPORTED = tuple(key for _, key, _, _ in COLUMNS)
ROOT = Path(__file__).resolve().parents[2]


def run_label(spec: str) -> str:
    """A file-name-safe label: ``polynomial:form=sketch`` -> ``polynomial_form-sketch``."""
    return spec.replace(":", "_").replace("=", "-").replace(",", "_").replace("/", "-")


@dataclass
class RunResult:
    backend: str
    seed: int
    seconds: float
    status: str  # "ok", "crashed", "timeout"
    metrics: dict[str, float] = field(default_factory=dict)
    global_step: int | None = None

    def value(self, key: str) -> float | None:
        return self.metrics.get(key)


def run_one(
    spec: str, seed: int, args: argparse.Namespace, runs_dir: Path
) -> tuple[list[str], RunResult]:
    """Run one training subprocess and read its metrics file."""
    label = f"{run_label(spec)}-s{seed}"
    metrics_file = runs_dir / f"{label}.json"
    metrics_file.unlink(missing_ok=True)
    cmd = [args.python, str(args.train_script), "fit"]
    for config in args.config:
        cmd += ["--config", config]
    cmd += [
        f"--model.init_args.attention={json.dumps(parse_attention_spec(spec))}",
        f"--seed_everything={seed}",
        f"--experiment={args.experiment}",
        f"--run_name={label}",
        f"--metrics_file={metrics_file}",
        "--test_after_fit=true",
        "--trainer.enable_progress_bar=false",
        *(f"--{assignment}" for assignment in args.set),
    ]
    if args.dry_run:
        return cmd, RunResult(spec, seed, 0.0, "dry-run")
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        status = "ok" if proc.returncode == 0 else "crashed"
        if status == "crashed":
            log.warning("run %s failed (exit %d):\n%s", label, proc.returncode, proc.stderr[-3000:])
    except subprocess.TimeoutExpired:
        status = "timeout"
    seconds = time.perf_counter() - start
    result = RunResult(spec, seed, seconds, status)
    if status == "ok" and metrics_file.exists():
        record = json.loads(metrics_file.read_text())
        result.metrics = {**record.get("metrics", {}), **record.get("test", {})}
        result.global_step = record.get("global_step")
    elif status == "ok":
        result.status = "crashed"
        log.warning("run %s wrote no metrics file %s", label, metrics_file)
    return cmd, result


def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def _fmt(mean: float | None, std: float | None, scale: float = 1.0, digits: int = 2) -> str:
    if mean is None:
        return "–"
    return f"{mean * scale:.{digits}f} ± {std * scale:.{digits}f}"


def summarize(results: list[RunResult], *, metric: str, threshold: float) -> list[dict[str, Any]]:
    """One row per backend: mean/std of REPORTED metrics and wall time, failure counts."""
    rows = []
    for spec in dict.fromkeys(r.backend for r in results):
        runs = [r for r in results if r.backend == spec]
        ok = [r for r in runs if r.status == "ok"]
        row: dict[str, Any] = {
            "backend": spec,
            "runs": len(runs),
            "crashed": sum(r.status != "ok" for r in runs),
            "not_converged": sum(
                (r.value(metric) is None or r.value(metric) < threshold) for r in ok
            ),
        }
        for key in REPORTED:
            mean, std = _mean_std([v for r in ok if (v := r.value(key)) is not None])
            row[f"{key}_mean"], row[f"{key}_std"] = mean, std
        row["seconds_mean"], row["seconds_std"] = _mean_std([r.seconds for r in ok])
        rows.append(row)
    return rows


def write_outputs(
    out: Path,
    results: list[RunResult],
    summary: list[dict[str, Any]],
    *,
    command: str,
    metric: str,
    threshold: float,
) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(summary[0]))
        writer.writeheader()
        writer.writerows(summary)
    run_rows = [
        {
            "backend": r.backend,
            "seed": r.seed,
            "status": r.status,
            "seconds": round(r.seconds, 1),
            "global_step": r.global_step,
            **{k: r.value(k) for k in REPORTED},
        }
        for r in results
    ]
    with out.with_name(out.name + "_runs.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(run_rows[0]))
        writer.writeheader()
        writer.writerows(run_rows)
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        f"Machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}; runs one after another.\n",
        f"Test split, best-by-validation checkpoint. Mean ± std over seeds; "
        f'"not converged" = {metric} < {threshold}; crashed runs are excluded from the means.\n',
        "| backend | runs | not converged | crashed | "
        + " | ".join(title for title, *_ in COLUMNS)
        + " | wall time / run (s) |",
        "|---|---|---|---|" + "---|" * (len(COLUMNS) + 1),
    ]
    for row in summary:
        cells = [
            _fmt(row[f"{key}_mean"], row[f"{key}_std"], scale, digits)
            for _, key, scale, digits in COLUMNS
        ]
        lines.append(
            f"| `{row['backend']}` | {row['runs']} | {row['not_converged']} | {row['crashed']} | "
            + " | ".join(cells)
            + f" | {_fmt(row['seconds_mean'], row['seconds_std'], 1, 0)} |"
        )
    lines += [
        "",
        "Per run:",
        "",
        "| backend | seed | status | steps | token acc | exact acc | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        tok, ex = r.value("test/token_acc"), r.value("test/exact_acc")
        lines.append(
            f"| `{r.backend}` | {r.seed} | {r.status} | {r.global_step or '–'} "
            f"| {'–' if tok is None else f'{tok:.4f}'} | {'–' if ex is None else f'{ex:.4f}'} "
            f"| {r.seconds:.0f} |"
        )
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m attn_lightning.studies.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", action="append", required=True, help="train.py config(s)")
    parser.add_argument("--backends", nargs="+", required=True, help="name[:key=value,...]")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra train.py argument, e.g. trainer.max_steps=3000 (repeatable)",
    )
    parser.add_argument("--out", required=True, type=Path, help="output path without extension")
    parser.add_argument("--metric", default="test/token_acc", help="convergence metric")
    parser.add_argument("--threshold", type=float, default=0.99, help="convergence threshold")
    parser.add_argument("--experiment", default=None, help="log/checkpoint folder (default: out)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run")
    parser.add_argument("--python", default=sys.executable, help="interpreter for train.py")
    parser.add_argument("--train-script", default=ROOT / "train.py", type=Path)
    parser.add_argument("--dry-run", action="store_true", help="print the commands only")
    return parser


def main(argv: list[str] | None = None) -> list[RunResult]:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser().parse_args(argv)
    for spec in args.backends:
        parse_attention_spec(spec)  # fail before the first run on a malformed spec
    bad = [a for a in args.set if "=" not in a]
    if bad:
        raise SystemExit(f"--set expects KEY=VALUE, got {bad}")
    args.experiment = args.experiment or f"sweep-{args.out.name}"
    runs_dir = Path("sweeps") / args.experiment
    runs_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for spec in args.backends:
        for seed in args.seeds:
            cmd, result = run_one(spec, seed, args, runs_dir)
            if args.dry_run:
                log.info("%s", shlex.join(cmd))
                continue
            log.info(
                "%-40s seed %d: %s in %.0f s, %s=%s",
                spec,
                seed,
                result.status,
                result.seconds,
                args.metric,
                result.value(args.metric),
            )
            results.append(result)
            # Rewritten after every run: a long sweep can be inspected, or stopped, part-way.
            summary = summarize(results, metric=args.metric, threshold=args.threshold)
            write_outputs(
                args.out,
                results,
                summary,
                command="python -m attn_lightning.studies.sweep " + shlex.join(argv),
                metric=args.metric,
                threshold=args.threshold,
            )
        log.info("wrote %s.md, %s.csv, %s_runs.csv", args.out, args.out, args.out)
    return results


if __name__ == "__main__":
    main()
