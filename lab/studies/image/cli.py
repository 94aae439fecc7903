"""The image-generation study's command line: ``python -m lab.studies.image``.

``samples``: PNG grids of unconditional samples and occluded completions of a trained checkpoint
(``image.samples``)::

    python -m lab.studies.image samples --ckpt-path checkpoints/image/<run>/last.ckpt \\
        --out docs/results/figures --prefix linear_

The runs themselves are sweeps (``python -m lab.studies.sweep`` over the
``configs/image/`` overlays); their per-seed and paired tables are a plan page's ``paired``
report (``image.tables``, ``configs/studies/image28_mnist5k.yaml``).
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from lab.studies.arguments import log_to_stderr, study_parser
from lab.studies.image import samples

log = logging.getLogger("lab.studies.image")
PROG = "python -m lab.studies.image"


def build_parser() -> argparse.ArgumentParser:
    """The image study's CLI (see the module docstring)."""
    parser = study_parser(PROG, __doc__)
    sub = parser.add_subparsers(dest="subcommand", required=True, metavar="{samples}")
    samples.add_arguments(
        sub.add_parser("samples", help="sample and completion grids of a checkpoint as PNG")
    )
    return parser


def main(argv: list[str] | None = None) -> list[Path]:
    """Run the image study's subcommand; returns the files it wrote."""
    log_to_stderr()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        paths = samples.samples(args)
    except (FileNotFoundError, ValueError) as error:  # a missing or unreadable checkpoint
        parser.error(str(error))
    for path in paths:
        log.info("wrote %s", path)
    return paths
