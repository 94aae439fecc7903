"""The checks backend constructors run on their options, one wording for each kind of mistake.

Every backend validates its options when it is built (so a bad YAML value fails before training
starts) and names the bad value and what is allowed (``ValueError``), in the same words whichever
backend it is: ``unknown kernel 'gaussian' for attention 'performer'; allowed: positive, ...``,
``sketch_size must be an int >= 1, got 0``.
"""

from __future__ import annotations

from collections.abc import Iterable


def check_choice(option: str, value: object, allowed: Iterable[str], *, backend: str) -> str:
    """``value`` if it is one of ``allowed``, else a ValueError naming it and listing them all."""
    choices = tuple(allowed)
    if not isinstance(value, str) or value not in choices:
        raise ValueError(
            f"unknown {option} {value!r} for attention {backend!r}; allowed: {', '.join(choices)}"
        )
    return value


def check_int(option: str, value: object, *, minimum: int, what: str = "") -> int:
    """``value`` if it is an int ``>= minimum`` (a bool is not), else a ValueError naming it.

    ``what`` says what the number counts, e.g. ``"tokens per block"``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        meaning = f" ({what})" if what else ""
        raise ValueError(f"{option} must be an int >= {minimum}{meaning}, got {value!r}")
    return value


def check_eps(eps: object) -> float:
    """``eps`` (added to a normaliser) as a float if it is a number >= 0, else a ValueError."""
    if isinstance(eps, bool) or not isinstance(eps, int | float) or not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    return float(eps)


def check_state_request(head_dim: int, seq_len: object, value_dim: object) -> int:
    """Dv of a ``state_size`` request (``value_dim``, or ``head_dim`` when None) once ``seq_len``
    is an int >= 0 and Dv an int >= 1; a ValueError naming the bad one otherwise."""
    check_int("seq_len", seq_len, minimum=0, what="tokens consumed")
    return head_dim if value_dim is None else check_int("value_dim", value_dim, minimum=1)
