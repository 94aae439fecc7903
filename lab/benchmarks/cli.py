"""Command line of ``python -m lab.benchmark <command> ...``: one table of commands.

``COMMANDS`` is the table: a row per subcommand, naming its help line, the function that adds its
flags and the function that runs it (``run(args) -> str``: the markdown it prints on stdout). The
subparsers are built from the rows; nothing else knows the commands. Every command logs progress
on stderr and writes its CSV / markdown / PNG files, each recording the machine, versions and
settings. Backends are ``name[:key=value,...]`` (see ``measure.parse_backend``).

Examples::

    python -m lab.benchmark latency --backends softmax linear performer \\
        --lengths 256 1024 4096 16384 --causal both
    python -m lab.benchmark latency --protocol fixed-batch --out docs/figures
    python -m lab.benchmark approx --out docs/figures
    python -m lab.benchmark kernels --checkpoint checkpoints/last.ckpt
    python -m lab.benchmark learned --checkpoints checkpoints/<study>/*/best-*.ckpt
    python -m lab.benchmark model --models reversal pixel \\
        --backends softmax linear performer polysketch --lengths 256 1024 4096 16384 \\
        --widths 64 256 --out docs/figures
    python -m lab.benchmark triton-static --shapes 2,4,32768,64
    python -m lab.benchmark race --shapes 2x4x32768x64 --contenders flash linear:torch
    python -m lab.benchmark generation --checkpoints \\
        checkpoints/image/<softmax-run>/last.ckpt checkpoints/image/<linear-run>/last.ckpt \\
        --batches 1 32 max --out docs/results/image_throughput_trained
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attn_lightning.records.environment import command_line
from lab.benchmarks import (
    approximation,
    decode,
    generation,
    kernel_shapes,
    latency,
    model_step,
    race,
    triton_static,
)
from lab.benchmarks.measure import UsageError
from lab.benchmarks.report import PROG


@dataclass(frozen=True)
class Benchmark:
    """One subcommand: its line in ``--help``, the function adding its flags to its subparser,
    and its run (parsed arguments, ``command_line`` set, -> the markdown it prints). Its own
    ``--help`` text is its module's docstring."""

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], str]

    @property
    def description(self) -> str:
        return sys.modules[self.run.__module__].__doc__ or self.help


COMMANDS: dict[str, Benchmark] = {
    "latency": Benchmark(
        "forward / forward+backward time, peak memory and counted FLOPs vs N",
        latency.add_arguments,
        latency.run,
    ),
    "decode": Benchmark("per-token step() latency", decode.add_arguments, decode.run),
    "approx": Benchmark(
        "relative error vs exact softmax", approximation.add_arguments, approximation.run
    ),
    "kernels": Benchmark("similarity vs angle", kernel_shapes.add_arguments, kernel_shapes.run),
    "learned": Benchmark(
        "learned polynomial coefficients and q'/k' LayerNorm scales of trained checkpoints",
        kernel_shapes.add_learned_arguments,
        kernel_shapes.run_learned,
    ),
    "model": Benchmark(
        "tokens/s of a whole training step of the real models, and its attention share",
        model_step.add_arguments,
        model_step.run,
    ),
    "generation": Benchmark(
        "images/s of whole-image sampling (random or trained models), the histogram baseline, "
        "the decode-latency plot",
        generation.add_arguments,
        generation.run,
    ),
    "triton-static": Benchmark(
        "our Triton causal product compiled for sm_90 on a CPU: launches, registers, spills, "
        "shared memory, wgmma, modelled bytes against the roofline",
        triton_static.add_arguments,
        triton_static.run,
    ),
    "race": Benchmark(
        "ms per causal fwd+bwd of fla's op, flash and linear on each kernel at given shapes, each "
        "checked against the float32 torch kernel",
        race.add_arguments,
        race.run,
    ),
    "profile": Benchmark(
        "torch.profiler's top kernels of each race contender at one shape",
        race.add_profile_arguments,
        race.run_profile,
    ),
    "bandwidth": Benchmark(
        "the device's copy bandwidth (the memory roofline of the GPU report)",
        race.add_bandwidth_arguments,
        race.run_bandwidth,
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The parser: one subparser per row of ``COMMANDS``."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in COMMANDS.items():
        command.add_arguments(
            sub.add_parser(
                name,
                help=command.help,
                description=command.description,
                formatter_class=argparse.RawDescriptionHelpFormatter,
            )
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: this process's arguments), run the command, print its markdown.

    Returns:
        0; a usage error exits with status 2 and one line naming it.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    args.command_line = command_line(PROG, argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        text = COMMANDS[args.command].run(args)
    except UsageError as err:
        parser.exit(2, f"{PROG} {args.command}: error: {err}\n")
    sys.stdout.write(text)
    return 0
