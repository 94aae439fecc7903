"""The image-generation study's command line: ``python -m attn_lightning.studies.image``.

``samples``: PNG grids of unconditional samples and occluded completions of a trained checkpoint
(``image.samples``)::

    python -m attn_lightning.studies.image samples --ckpt-path checkpoints/image/<run>/last.ckpt \\
        --out docs/results/figures --prefix linear_

``tables``: per-seed and paired-by-seed tables of a sweep's run records, no training::

    python -m attn_lightning.studies.image tables --runs docs/results/image28_mnist5k/runs \\
        --variants softmax linear performer polysketch --control softmax \\
        --out docs/results/image28_mnist5k_paired

The runs themselves are sweeps (``python -m attn_lightning.studies.sweep`` over the
``configs/image/`` overlays).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from attn_lightning.studies.arguments import log_to_stderr, study_parser
from attn_lightning.studies.image import samples, tables

log = logging.getLogger("attn_lightning.studies.image")
PROG = "python -m attn_lightning.studies.image"


def build_parser() -> argparse.ArgumentParser:
    """The image study's CLI (see the module docstring)."""
    parser = study_parser(PROG, __doc__)
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="{samples,tables}")
    samples.add_arguments(
        sub.add_parser("samples", help="sample and completion grids of a checkpoint as PNG")
    )
    tables.add_arguments(
        sub.add_parser("tables", help="per-seed and paired tables from run records")
    )
    return parser


def main(argv: list[str] | None = None) -> list[Path]:
    """Run the image study's subcommand; returns the files it wrote."""
    log_to_stderr()
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if args.subcommand == "tables":
            paths = tables.tables(args, prog=PROG, argv=argv)
        else:
            paths = samples.samples(args)
    except (FileNotFoundError, ValueError) as error:  # no records, a wrong name or checkpoint
        parser.error(str(error))
    for path in paths:
        log.info("wrote %s", path)
    return paths
