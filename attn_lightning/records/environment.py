"""Where a result was measured: the machine, the versions, the command and the settings.

``environment`` is the provenance every benchmark and study file carries (a ``# key: value``
header in CSV, a bullet list in markdown); ``machine_line`` is the one-line form under a study's
table. Results measured on different machines are never compared: the line says which.
"""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str:
    """The short commit of the checkout this package runs from, ``unknown`` outside one."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def hardware(device: torch.device) -> str:
    """``cuda: NVIDIA H100 80GB HBM3, 79 GiB, CUDA 13.0`` or ``cpu: <model>, 2 logical CPUs``."""
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return (
            f"{device.type}: {props.name}, {props.total_memory / 2**30:.0f} GiB, "
            f"CUDA {torch.version.cuda}"
        )
    return f"{device.type}: {cpu_model()}, {os.cpu_count()} logical CPUs"


def command_line(prog: str, argv: list[str] | None = None) -> str:
    """``prog`` followed by the arguments (default ``sys.argv[1:]``), shell-quoted."""
    return f"{prog} {shlex.join(sys.argv[1:] if argv is None else argv)}".strip()


def environment(
    device: torch.device, *, command: str | None = None, **settings: Any
) -> dict[str, str]:
    """Machine, versions, the command line and the run's settings, as strings.

    Args:
        device: the device measured on.
        command: the command that regenerates the result (default: this process's argv).
        settings: more ``key: value`` lines (repeats, budget, ...).
    """
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)  # None: run as a script
    main = spec.name if spec is not None else Path(sys.argv[0]).name
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "command": command or command_line(f"python -m {main}"),
        "device": hardware(device),
        "torch_threads": str(torch.get_num_threads()),
        "versions": f"python {platform.python_version()}, torch {torch.__version__}",
        "platform": platform.platform(),
        "git_commit": git_commit(),
    }
    meta.update({k: str(v) for k, v in settings.items()})
    return meta


def machine_line(*, jobs: int = 1, threads: bool = False) -> str:
    """``Machine: <platform>, <CPU>, Python 3.11.7; runs one after another.`` for a table's
    caption; ``jobs`` says how many runs shared the machine, ``threads`` adds torch's count."""
    pace = "runs one after another" if jobs <= 1 else f"{jobs} runs at a time"
    extra = f", {torch.get_num_threads()} torch threads" if threads else ""
    return (
        f"Machine: {platform.platform()}, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}{extra}; {pace}."
    )
