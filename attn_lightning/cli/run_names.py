"""``--experiment`` and ``--run_name`` are names of one folder each, never paths.

A run writes ``logs/<experiment>/<run>/`` and ``checkpoints/<experiment>/<run>/``. A name that is
a path put those folders elsewhere: ``--run_name ../../x`` or ``/abs/x`` wrote outside ``logs/``
and ``checkpoints/`` (both runs' logs and checkpoints in one folder), ``a/b`` nested a run in
another's folder, and ``--run_name ""`` silently became ``version_N``. So a name may not be empty,
``.`` or ``..``, or hold a path separator (``/`` or ``\\``: a run folder copied to Windows keeps
its meaning); an absolute path holds one.
"""

from __future__ import annotations

from typing import Any

NAMES = ("experiment", "run_name")
SEPARATORS = ("/", "\\")
RULE = "names one folder under logs/ and checkpoints/: not empty, not '.' or '..', no '/' or '\\'"


def name_problem(value: str) -> str | None:
    """Why ``value`` is not a run or experiment name, or None when it is one."""
    if value.strip() == "":
        return "is empty"
    if value in (".", ".."):
        return f"is {value!r}, which names no folder of its own"
    separator = next((s for s in SEPARATORS if s in value), None)
    if separator is not None:
        return f"holds {separator!r}, a path separator"
    return None


def check_names(config: Any) -> str | None:
    """The one-line error for the first of ``--experiment``/``--run_name`` that is not a name,
    or None (an option left unset is fine: ``default`` and ``version_N``)."""
    for option in NAMES:
        value = config.get(option)
        if value is None:
            continue
        problem = name_problem(str(value))
        if problem:
            what = "a run name" if option == "run_name" else "an experiment name"
            return (
                f"--{option} {str(value)!r} {problem}; {what} {RULE} "
                f"(e.g. --{option} {_example(str(value))})"
            )
    return None


def _example(value: str) -> str:
    """A name close to ``value``: its path's parts joined by '-' (``a/b`` -> ``a-b``)."""
    parts = [p for p in value.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    return "-".join(parts) or "my-run"
