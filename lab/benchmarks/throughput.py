"""Images/s of whole-image sampling per backend (the ``generation`` command's measurement).

``measure``: a random-weight model; ``measure_checkpoint``: a trained checkpoint at every
requested batch (``largest_batch`` for ``max``; halved on a real out-of-memory); ``add_ratios``:
each row against softmax's step and prefix recompute at the same requested batch;
``write_throughput``: ``<out>.csv`` and ``<out>.md``, the paper's numbers beside the table (data:
``docs/references/linear_transformers_generation.csv``, read by ``results.references``).
"""

from __future__ import annotations

import argparse
import logging
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attn_lightning.attention import parse_attention_spec
from attn_lightning.models.pixel import PixelTransformer, sample_pixels
from attn_lightning.models.specs import PixelSpec
from attn_lightning.records import machine_line, markdown_table, write_csv
from lab.benchmarks.measure import is_out_of_memory, peak_bytes, time_calls
from lab.results.references import reference

log = logging.getLogger("lab.benchmarks.generation")

Row = dict[str, Any]
PROBE_BATCH = 4  # images whose peak memory sizes the `max` batch (memory is linear in batch)
FIRST_MAX = 32  # `max` doubles from here


def time_generation(
    model: PixelTransformer, *, batch: int, method: str, repeats: int, device: torch.device
) -> list[float]:
    """The ``repeats`` wall times (s) of sampling ``batch`` whole images unconditionally."""
    observed = torch.empty(batch, 0, dtype=torch.long, device=device)
    # Sampling draws on the model's device: a CPU generator would copy every step's probabilities.
    generator = torch.Generator(device=device)
    seed = iter(range(repeats))

    def sample() -> None:
        generator.manual_seed(next(seed))
        sample_pixels(model, observed=observed, generator=generator, method=method)

    return list(time_calls(sample, repeats=repeats, device=device))


def largest_batch(
    model: PixelTransformer,
    *,
    method: str,
    device: torch.device,
    budget_bytes: float,
    limit: int,
) -> int:
    """The batch for ``max``: from ``FIRST_MAX``, doubled while the peak memory projected from
    a ``PROBE_BATCH`` probe stays within ``budget_bytes`` and ``limit``; halved below
    ``FIRST_MAX`` if even that would not fit (at least 1)."""
    observed = torch.empty(PROBE_BATCH, 0, dtype=torch.long, device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    probe = peak_bytes(
        lambda: sample_pixels(model, observed=observed, generator=generator, method=method),
        device=device,
    )
    if probe is None:
        log.warning("peak memory not measurable here; `max` batch falls back to %d", FIRST_MAX)
        return min(FIRST_MAX, limit)
    # Counting the call's fixed allocations per image overestimates a large batch's need: safe.
    per_image = max(probe, 1) / PROBE_BATCH
    batch = min(FIRST_MAX, limit)
    while batch > 1 and batch * per_image > budget_bytes:
        batch //= 2
    while 2 * batch <= limit and 2 * batch * per_image <= budget_bytes:
        batch *= 2
    return batch


def _row(backend: str, method: str, batch: int, tokens: int, times: Sequence[float]) -> Row:
    """One timed row: ``seconds`` (and the rates) from the best of the repeats, the least
    disturbed by other work on a shared machine; ``seconds_median`` and ``repeats`` beside it.

    The numbers stay unrounded here, so ``add_ratios`` divides the measured rates (a rate
    rounded first, 0.04 images/s for 0.0403, moved a ratio by 1 %); ``shown`` rounds them
    for the files.
    """
    seconds = min(times)
    return {
        "backend": backend,
        "method": method,
        "batch": batch,
        "tokens": tokens,
        "seconds": seconds,
        "seconds_median": statistics.median(times),
        "repeats": len(times),
        "images_per_s": batch / seconds,
        "ms_per_pixel": 1e3 * seconds / tokens,
    }


def shown(row: Row) -> Row:
    """``row`` as the files show it: seconds to the millisecond, images/s to 4 significant
    figures (0.04035, not 0.04), ms per pixel to 4 decimals; every other value as it is."""
    out = dict(row)
    for key, digits in (("seconds", 3), ("seconds_median", 3), ("ms_per_pixel", 4)):
        out[key] = round(row[key], digits)
    out["images_per_s"] = float(f"{row['images_per_s']:.4g}")
    return out


def measure(spec: str, method: str, *, args: argparse.Namespace) -> Row:
    """Best of ``args.repeats`` timed batches of ``args.batch`` images of a random model."""
    torch.manual_seed(0)
    device = torch.device(args.device)
    sizes = PixelSpec(
        d_model=args.d_model, num_heads=args.num_heads, num_layers=args.num_layers, d_ff=args.d_ff
    )
    model = PixelTransformer(
        sizes,
        levels=args.levels,
        seq_len=args.image_size**2,
        attention=parse_attention_spec(spec),
    ).eval()
    model.to(device)
    times = time_generation(
        model, batch=args.batch, method=method, repeats=args.repeats, device=device
    )
    row = _row(spec, method, args.batch, args.image_size**2, times)
    log.info("%-40s %-9s %.2f images/s", spec, method, row["images_per_s"])
    return row


def measure_checkpoint(
    path: Path, loaded: tuple[PixelTransformer, dict[str, Any]], *, args: argparse.Namespace
) -> list[Row]:
    """Rows of one trained checkpoint (``loaded``: what ``load_pixel_model(path)`` returns):
    ``step`` (and prefix recompute for softmax or a backend or run named in ``--recompute``) at
    every ``--batches`` entry."""
    device = torch.device(args.device)
    model, info = loaded
    model.to(device)
    methods = ["step"] if model.supports_recurrence else []
    if info["name"] == "softmax" or {info["name"], info["backend"], info["run"]} & set(
        args.recompute
    ):
        methods.append("recompute")
    if not model.supports_recurrence:
        log.warning("%s: a backend without recurrence; step not timed", path)
    labels = {"run": info["run"], "train_step": info["step"], "model": info["model"]}
    rows = []
    for requested in args.batches:
        for method in methods:
            batch = (
                largest_batch(
                    model,
                    method=method,
                    device=device,
                    budget_bytes=args.memory_budget_gb * 2**30,
                    limit=args.max_batch_limit,
                )
                if requested == "max"
                else int(requested)
            )
            if method == "recompute" and batch > args.recompute_max_batch:
                log.info(
                    "%s: prefix recompute at batch %d skipped (--recompute-max-batch %d)",
                    path,
                    batch,
                    args.recompute_max_batch,
                )
                continue
            while True:
                try:
                    times = time_generation(
                        model, batch=batch, method=method, repeats=args.repeats, device=device
                    )
                    break
                except (RuntimeError, MemoryError) as err:
                    if requested != "max" or batch == 1 or not is_out_of_memory(err):
                        raise
                    log.warning("%s %s: out of memory at batch %d, halving", path, method, batch)
                    batch //= 2
                    if device.type == "cuda":
                        torch.cuda.empty_cache()
            row = {**_row(info["backend"], method, batch, model.seq_len, times), **labels}
            row["requested_batch"] = requested
            row["checkpoint"] = str(path)
            log.info(
                "%-40s %-9s batch %-5s %.2f images/s",
                f"{info['backend']} ({info['run']})",
                method,
                batch,
                row["images_per_s"],
            )
            rows.append(row)
    return rows


def add_ratios(rows: list[Row]) -> None:
    """``vs_softmax_kv_cache`` / ``vs_softmax_recompute``: images/s over the first softmax
    model's step / prefix recompute at the same requested batch ("" where there is none),
    from the rows' unrounded rates, to 2 decimals."""

    def key(row: Row) -> str:
        return str(row.get("requested_batch", row["batch"]))

    def is_softmax(row: Row) -> bool:
        return str(row["backend"]).split(":")[0] == "softmax"

    softmax_model = next((r.get("checkpoint") for r in rows if is_softmax(r)), None)
    for column, method in (("vs_softmax_kv_cache", "step"), ("vs_softmax_recompute", "recompute")):
        base = {
            key(r): r["images_per_s"]
            for r in reversed(rows)  # the first softmax row of each batch wins
            if is_softmax(r) and r["method"] == method and r.get("checkpoint") == softmax_model
        }
        for row in rows:
            ref = base.get(key(row))
            row[column] = round(row["images_per_s"] / ref, 2) if ref else ""


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
    header = ["backend", *(["run", "train step"] if checkpoint_mode else [])]
    header += ["decoding", "batch", "pixels/image", "seconds/batch (best)", "median", "images/s"]
    header += ["ms per pixel step", "× softmax KV cache", "× softmax recompute"]
    body = []
    for r in rows:
        batch = f"max → {r['batch']}" if r.get("requested_batch") == "max" else r["batch"]
        run = [r["run"], r["train_step"]] if checkpoint_mode else []
        timing = [r["tokens"], r["seconds"], r["seconds_median"], r["images_per_s"]]
        timing.append(r["ms_per_pixel"])
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
