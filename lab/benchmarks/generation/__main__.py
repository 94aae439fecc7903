"""The old spelling ``python -m lab.benchmarks.generation ...``: one ``FutureWarning``
naming the new one, ``python -m lab.benchmark generation ...``, then the same run."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence

from lab.benchmarks import cli

OLD = "python -m lab.benchmarks.generation"
NEW = "python -m lab.benchmark generation"


def main(argv: Sequence[str] | None = None) -> int:
    """Warn, then run ``generation`` with the same arguments (default: this process's)."""
    warnings.warn(f"{OLD} is deprecated; use {NEW}", FutureWarning, stacklevel=2)
    return cli.main(["generation", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    raise SystemExit(main())
