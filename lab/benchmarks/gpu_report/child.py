"""The process of one benchmark stage: several jobs, one after another, each writing its files.

A job is a ``python -m lab.benchmark`` command line (``latency ...``, ``model ...``,
``decode ...``), ``kernels ...`` (``kernels.main``), ``profile ...`` (``profile.main``) or
``copy ...`` (``bandwidth.main``: the device's copy bandwidth); each is
imported when its first job runs (the benchmark CLI imports Lightning: seconds a stage that
races kernels need not spend). Running them in one process saves a Python,
torch and CUDA start-up per job, and each job's CSV and markdown are written when it ends, so a
stage killed at its budget keeps the jobs it finished. A job that fails is logged with its
traceback and the next one runs; the process exits 1 if any failed.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from collections.abc import Sequence

KERNELS, PROFILE, COPY = "kernels", "profile", "copy"
# ``python -c`` program of the stage process: no entry point of its own is needed.
PROGRAM = (
    "import sys; from lab.benchmarks.gpu_report.child import main; sys.exit(main(sys.argv[1:]))"
)

log = logging.getLogger(__name__)


def command(jobs: Sequence[Sequence[str]]) -> tuple[str, ...]:
    """The stage's command line running ``jobs`` with this interpreter."""
    return (sys.executable, "-c", PROGRAM, json.dumps([list(job) for job in jobs]))


def main(argv: Sequence[str]) -> int:
    """Run the jobs of ``argv[0]`` (a JSON list of argument lists); 1 if any failed."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    failed = 0
    for job in json.loads(argv[0]):
        log.info("job: %s", " ".join(job))
        try:
            if job[0] == KERNELS:
                from lab.benchmarks.gpu_report import kernels

                kernels.main(job[1:])
            elif job[0] == PROFILE:
                from lab.benchmarks.gpu_report import profile

                profile.main(job[1:])
            elif job[0] == COPY:
                from lab.benchmarks.gpu_report import bandwidth

                bandwidth.main(job[1:])
            else:
                from lab.benchmarks import cli

                cli.main(job)
        except (Exception, SystemExit):  # a usage error exits: the next job still runs
            failed += 1
            log.error("job failed: %s\n%s", " ".join(job), traceback.format_exc())
        sys.stdout.flush()
    return 1 if failed else 0
