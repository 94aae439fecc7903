"""The throughput files of ``generation``: ``<out>.csv`` (one row per timing) and ``<out>.md``
(the command, the machine, the published numbers it is set against, one table).

The paper's numbers are data: ``docs/references/linear_transformers_generation.csv`` (its
``# source:`` line cites them), read with ``results.references.reference``.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from attn_lightning.records import machine_line, markdown_table, write_csv
from lab.benchmarks.generation.throughput import Row, add_ratios, shown
from lab.results.references import reference

REFERENCE = "linear_transformers_generation"
METHODS = {"step": "step (recurrent / KV cache)", "recompute": "prefix recompute"}


def _times(ratio: float) -> str:
    """A speed-up as the paper's numbers are read: whole from 10 up, three digits below."""
    return f"{ratio:.0f}" if ratio >= 10 else f"{ratio:.3g}"


def _speed(row: dict[str, str]) -> float:
    """A published figure as a speed (higher is faster): images/s as it is, s/image inverted."""
    exponent = {"images/s": 1, "s/image": -1}[row["unit"]]
    return float(row["value"]) ** exponent


def paper_context(name: str = REFERENCE) -> str:
    """One sentence per setting of the published numbers: each decoding's figure, then linear's
    speed-up over uncached (prefix recompute) and cached (KV cache) softmax, and the source."""
    meta, rows = reference(name)
    parts = []
    for setting in dict.fromkeys(r["setting"] for r in rows):
        mine = [r for r in rows if r["setting"] == setting]
        speed = {(r["backend"], r["decoding"]): _speed(r) for r in mine}
        linear = speed[("linear", "recurrent")]
        uncached = _times(linear / speed[("softmax", "recompute")])
        cached = _times(linear / speed[("softmax", "kv_cache")])
        figures = ", ".join(f"{r['label']} {r['value']}" for r in mine)
        parts.append(
            f"{setting} {figures}, i.e. linear **{uncached}×** uncached and **{cached}×** cached "
            "softmax"
        )
    return f"{meta['source']}; {meta['model']}: " + "; ".join(parts) + "."


def throughput_table(rows: Sequence[Row]) -> str:
    """The markdown table of the rows (with run and train step columns for checkpoints)."""
    checkpoint_mode = any("run" in r for r in rows)
    # CSVs written before the median was kept have none: no column rather than an empty one.
    with_median = any("seconds_median" in r for r in rows)
    header = ["backend", *(["run", "train step"] if checkpoint_mode else [])]
    header += ["decoding", "batch", "pixels/image", "seconds/batch (best)"]
    header += [*(["median"] if with_median else []), "images/s"]
    header += ["ms per pixel step", "× softmax KV cache", "× softmax recompute"]
    body = []
    for r in rows:
        batch = f"max → {r['batch']}" if r.get("requested_batch") == "max" else r["batch"]
        run = [r["run"], r["train_step"]] if checkpoint_mode else []
        median = [r.get("seconds_median", "")] if with_median else []
        timing = [r["tokens"], r["seconds"], *median, r["images_per_s"], r["ms_per_pixel"]]
        ratios = [r["vs_softmax_kv_cache"], r["vs_softmax_recompute"]]
        body.append([f"`{r['backend']}`", *run, METHODS[r["method"]], batch, *timing, *ratios])
    return markdown_table(header, body)


def write_throughput(rows: list[Row], out: Path, command: str, args: argparse.Namespace) -> str:
    """Add the ratio columns (from the unrounded rates), write ``<out>.csv`` and ``<out>.md``
    with the rounded numbers; return the markdown."""
    add_ratios(rows)
    rows = [shown(r) for r in rows]
    write_csv(out.with_suffix(".csv"), rows)
    if any("run" in r for r in rows):
        trained = dict.fromkeys(f"`{r['checkpoint']}`: {r['model']}" for r in rows)
        models = "Trained checkpoints (`train step`: global step) — " + "; ".join(trained)
    else:
        models = (
            f"Randomly initialised model: d_model={args.d_model}, heads={args.num_heads}, "
            f"layers={args.num_layers}, d_ff={args.d_ff}, levels={args.levels}"
        )
    lines = [
        f"Regenerate with:\n\n```bash\n{command}\n```\n",
        f"{machine_line(threads=True)} Torch {torch.__version__}, device {args.device}. "
        f"{models}; unconditional sampling, temperature 1; best of {args.repeats} batch(es), "
        "the median beside it. "
        "× softmax KV cache / × softmax recompute: images/s over softmax's step (preallocated KV "
        "cache) / prefix recompute at the same requested batch (`max`: each row at its own "
        "largest batch that fits).\n",
        f"For context, the paper: {paper_context()}\n",
        throughput_table(rows),
    ]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    return text
