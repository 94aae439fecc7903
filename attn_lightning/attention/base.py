"""The attention contract every backend implements.

Shape glossary (same as ``torch.nn.functional.scaled_dot_product_attention``):

    B   batch            H   heads
    L   query length     S   key/value length (L == S when causal)
    D   query/key dim    Dv  value dim

    q: (B, H, L, D)   k: (B, H, S, D)   v: (B, H, S, Dv)   ->   out: (B, H, L, Dv)

Mask polarity, one everywhere: ``key_padding_mask`` is ``(B, S)`` bool and **True marks a real
token** (may be attended). Masked keys contribute to neither numerator nor normaliser. A query
that can see no key at all (every key masked) gets a zero output rather than NaN.

Masked positions count for nothing, even when they hold NaN or ±inf. ``forward`` zeroes padded
keys and values with ``masked_fill`` before any backend sees them (never by a multiply: 0·NaN is
NaN). With ``causal=True`` a non-finite key or value at position j is zeroed too and every
output i ≥ j, the ones that see it, is set to NaN: earlier outputs and their gradients are
exactly those with finite values there. The causal guard never syncs with the host: it costs a
few elementwise passes over k, v and the output on the device; ``step`` has no mask, only the
past.

``check_finite``: ``set_check_finite(True)``, ``with check_finite(): ...`` or the environment
variable ``ATTN_LIGHTNING_CHECK_FINITE=1`` (read at import, so spawned DDP workers inherit it)
makes ``forward`` and ``step`` raise a ``ValueError`` naming the tensor (q, k or v), the backend
and the ``(b, h, n, d)`` position of the first non-finite value at an unmasked position (masked
garbage is allowed). Off by default: it costs a pass over the inputs and a device sync.

``grid``: ``forward(..., grid=(rows, cols))`` says how the S key tokens lie on a 2-D map, in raster
order (self-attention: the queries too); ``rows · cols`` must equal S. It is per call, like the
mask (an image batch may change size), never stored. Backends that do not use positions ignore
it; ``pool`` windows over it. None: the tokens are a sequence.

Options: every backend checks its options when it is built (``check_choice``, ``check_int``,
``check_eps``), so a bad YAML value fails before training starts, in one wording whichever backend
it is: ``unknown kernel 'gaussian' for attention 'performer'; allowed: positive, ...``,
``sketch_size must be an int >= 1, got 0``.

A backend only mixes values; projections, heads, norms and residuals live in
``attn_lightning.models.multihead.MultiHeadAttention``.
"""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence

import torch
from torch import Tensor, nn

# A recurrent state is a tuple of tensors owned by the caller: ``step`` returns it, never stores it.
State = tuple[Tensor, ...]
# (rows, cols) of the token map, raster order: see ``grid`` in the module docstring.
Grid = tuple[int, int]
# How the keys are laid out: on a grid, or (None) a plain sequence.
Layout = Grid | None
# A key padding mask, (B, S) bool, True = real token; None: every key is real.
Mask = Tensor | None

CHECK_FINITE_ENV = "ATTN_LIGHTNING_CHECK_FINITE"
# The process-wide switch, in a dict so the setters need no ``global``.
_SWITCHES = {
    "check_finite": os.environ.get(CHECK_FINITE_ENV, "").strip().lower()
    not in {"", "0", "false", "no", "off"}
}


def set_check_finite(enabled: bool) -> None:
    """Turn the input check of every backend's ``forward``/``step`` on or off, process-wide."""
    _SWITCHES["check_finite"] = bool(enabled)


def check_finite_enabled() -> bool:
    """Whether ``forward``/``step`` check their inputs (see the module docstring)."""
    return _SWITCHES["check_finite"]


@contextlib.contextmanager
def check_finite(enabled: bool = True) -> Iterator[None]:
    """``with check_finite(): ...`` checks inputs inside the block, then restores the switch."""
    previous = check_finite_enabled()
    set_check_finite(enabled)
    try:
        yield
    finally:
        set_check_finite(previous)


class Attention(nn.Module, abc.ABC):
    """Base class: validates inputs once, then dispatches to ``_attend`` / ``_step``.

    Subclasses set ``name`` (the registry key), implement ``_attend`` and, when they have an
    O(1)-state recurrent form, ``_step`` and ``supports_recurrence = True``.
    """

    name: str = "attention"
    supports_recurrence: bool = False
    supports_causal: bool = True
    # True when the similarity depends on token indices (local blocks): a query's block is its
    # index, so a single query sliced out of a sequence is a different query (contract tests
    # then compare whole prefixes, and drop trailing keys only).
    positional: bool = False
    # False when Dv must equal D (optimization's values dictionary reconstructs q from v).
    supports_any_value_dim: bool = True
    # False for self-attention-only mixers (local pooling on the token grid): no L != S form.
    supports_cross_attention: bool = True
    # True when a pair's similarity depends on the call's length (cosFormer's M = max(L, S)): a
    # causal prefix or a shorter key set is then another re-weighting, so contract tests that cut
    # a sequence do not apply.
    length_dependent: bool = False
    # What ``step()`` says when there is none: the way to decode instead.
    recurrence_hint: str = "decode by recomputing the prefix with forward(causal=True)"

    def __init__(self, *, head_dim: int) -> None:
        super().__init__()
        if not isinstance(head_dim, int) or head_dim <= 0:
            raise ValueError(f"head_dim must be a positive int, got {head_dim!r}")
        self.head_dim = head_dim

    # ------------------------------------------------------------------ public API
    def diagnostics(self) -> dict[str, float]:
        """Scalars worth watching while training (learned coefficients, weight sparsity, ...).

        ``callbacks.AttentionDiagnostics`` logs them per layer; empty for most backends. Cheap:
        called every N steps on rank 0, outside the graph.
        """
        return {}

    def state_size(self, *, seq_len: int, value_dim: int | None = None) -> int:
        """Floats one head of this backend keeps to decode after ``seq_len`` tokens (``step``'s
        state, per batch row and head): the x-axis of recall-vs-memory plots (Zoology, Based).

        Args:
            seq_len: N, tokens consumed so far (only a cache that grows with N depends on it).
            value_dim: Dv (None: ``head_dim``).

        Raises:
            NotImplementedError: the backend has no recurrent ``step`` (so no state), or does not
                report its size.
        """
        why = "has no recurrent step()" if not self.supports_recurrence else "does not report it"
        raise NotImplementedError(f"attention {self.name!r} has no state size: it {why}")

    def forward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        grid: Sequence[int] | None = None,
    ) -> Tensor:
        """Mix ``v`` by the similarity of ``q`` and ``k``; see the module docstring for shapes.

        ``grid``: ``(rows, cols)`` of the S key tokens on a 2-D map (raster order), or None.

        Raises:
            ValueError: bad shapes, mask or grid (``rows · cols != S``), L != S for a
                self-attention-only backend, naming the values.
            NotImplementedError: ``causal=True`` for a backend with no causal form.
        """
        self._check_inputs(q, k, v, causal=causal, key_padding_mask=key_padding_mask)
        cells = self._check_grid(grid, k.shape[2])
        if causal and not self.supports_causal:
            raise NotImplementedError(
                f"attention {self.name!r} does not support causal=True; "
                f"use a backend with a causal form (e.g. 'softmax', 'linear')"
            )
        if not self.supports_cross_attention and q.shape[2] != k.shape[2]:
            raise ValueError(
                f"attention {self.name!r} mixes each token with its neighbours (self-attention): "
                f"needs L == S, got L={q.shape[2]}, S={k.shape[2]}"
            )
        if check_finite_enabled():
            self._check_finite(q, k, v, key_padding_mask)
        if key_padding_mask is not None:
            # Zeroed, not multiplied: a padded NaN/inf would survive 0·x in any backend's sums.
            padded = ~key_padding_mask[:, None, :, None]  # (B, 1, S, 1)
            k, v = k.masked_fill(padded, 0.0), v.masked_fill(padded, 0.0)
        if causal:
            return self._attend_causal(q, k, v, key_padding_mask, cells)
        return self._attend(q, k, v, causal=False, key_padding_mask=key_padding_mask, grid=cells)

    def step(
        self, q: Tensor, k: Tensor, v: Tensor, state: State | None = None
    ) -> tuple[Tensor, State]:
        """Attend for one new token given the state of all previous ones.

        Args:
            q, k, v: ``(B, H, 1, D)``, ``(B, H, 1, D)``, ``(B, H, 1, Dv)`` for the new position.
            state: what the previous call returned, or None at the first position.

        Returns:
            ``(out, state)`` with ``out: (B, H, 1, Dv)`` equal to ``forward(causal=True)`` at this
            position, and the new state. The input state is not modified: every value it holds
            stays as it was, so a state may be stepped again, e.g. to branch several
            continuations from one prefix. The new state may share storage with it: a KV cache
            (``kv_cache``) appends into spare capacity past what the input state can see, and
            copies instead when that slot is already taken by an earlier step of that state.
        """
        if not self.supports_recurrence:
            raise NotImplementedError(
                f"attention {self.name!r} has no recurrent step(); {self.recurrence_hint}"
            )
        self._check_inputs(q, k, v, causal=True, key_padding_mask=None)
        if q.shape[2] != 1:
            raise ValueError(
                f"step() takes one token: q, k, v must have length 1, got {q.shape[2]}"
            )
        if check_finite_enabled():
            self._check_finite(q, k, v, None)
        return self._step(q, k, v, state)

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}"

    # ------------------------------------------------------------------ for subclasses
    @abc.abstractmethod
    def _attend(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Mask, grid: Layout
    ) -> Tensor: ...

    def _step(self, q: Tensor, k: Tensor, v: Tensor, state: State | None) -> tuple[Tensor, State]:
        raise NotImplementedError  # pragma: no cover - guarded by supports_recurrence

    def _attend_causal(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None, grid: Grid | None
    ) -> Tensor:
        """``_attend(causal=True)``, keeping a non-finite key or value from the earlier outputs.

        Every backend masks the future by a product with 0 somewhere (a tril'd chunk of scores
        times v, SDPA's masked weights times v, -inf added to a NaN score), so a NaN at j would
        reach the rows before j. Zeroed here, it cannot; the rows from j on are set to NaN.

        Where a tensor's values can be read on the host for free (``host_reads_are_free``: the
        CPU, which has no launch queue to stall), one probe decides and finite inputs skip the
        masks, whose three fills and their backward cost up to 1.7× a causal linear fwd + bwd
        there (docs/benchmarks.md). On CUDA a Python branch on the probe would be a device-to-host
        sync once per layer per step, so the masks always run on the device: on finite inputs
        they are all False and the fills copy k, v and out unchanged.
        """
        if host_reads_are_free(k.device):
            acc = accumulation_dtype(k.dtype)
            # One sum each, accumulated in float32 at least (fp16 cannot overflow it): any NaN or
            # inf makes it non-finite; a false alarm (an overflowing finite sum) takes the masked
            # path, which then finds no bad token.
            with torch.no_grad():
                finite = bool(torch.isfinite(k.sum(dtype=acc) + v.sum(dtype=acc)))
            if finite:
                return self._attend(
                    q, k, v, causal=True, key_padding_mask=key_padding_mask, grid=grid
                )
        with torch.no_grad():  # masks: nothing to record for backward
            bad = ~(torch.isfinite(k).all(dim=-1) & torch.isfinite(v).all(dim=-1))  # (B, H, S)
            sees_bad = bad.cummax(dim=-1).values[..., None]  # (B, H, L, 1): some j <= i is bad
        k, v = k.masked_fill(bad[..., None], 0.0), v.masked_fill(bad[..., None], 0.0)
        out = self._attend(q, k, v, causal=True, key_padding_mask=key_padding_mask, grid=grid)
        return out.masked_fill(sees_bad, float("nan"))

    def _check_finite(
        self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None
    ) -> None:
        """ValueError at the first non-finite value of q, k, v outside the padded keys."""
        real = None if key_padding_mask is None else key_padding_mask[:, None, :, None]
        for label, t, keep in (("q", q, None), ("k", k, real), ("v", v, real)):
            bad = ~torch.isfinite(t)
            if keep is not None:
                bad &= keep
            if bool(bad.any()):
                where = tuple(int(i) for i in bad.nonzero()[0])
                raise ValueError(
                    f"attention {self.name!r} got a non-finite {label}: {t[where].item()} at "
                    f"(b, h, n, d) = {where}, the first at an unmasked position (check_finite "
                    f"is on; padded keys and values may hold anything)"
                )

    def _check_grid(self, grid: Sequence[int] | None, s: int) -> Grid | None:
        """``grid`` as a ``(rows, cols)`` tuple of positive ints covering the S tokens, or None."""
        if grid is None:
            return None
        cells = tuple(grid) if isinstance(grid, Sequence) else ()
        if len(cells) != 2 or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in cells
        ):
            raise ValueError(
                f"attention {self.name!r}: grid must be (rows, cols), two positive ints, "
                f"got {grid!r}"
            )
        rows, cols = cells
        if rows * cols != s:
            raise ValueError(
                f"attention {self.name!r}: grid {(rows, cols)} has {rows * cols} cells but the "
                f"sequence has S={s} tokens"
            )
        return rows, cols

    def _check_inputs(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding_mask: Tensor | None
    ) -> None:
        for label, t in (("q", q), ("k", k), ("v", v)):
            if t.dim() != 4:
                raise ValueError(f"{label} must be 4-D (B, H, N, D), got shape {tuple(t.shape)}")
        (b, h, l_q, d), (bk, hk, s, dk), (bv, hv, sv, _) = q.shape, k.shape, v.shape
        if (b, h) != (bk, hk) or (b, h) != (bv, hv):
            raise ValueError(
                f"q, k, v must share (B, H): got "
                f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
            )
        if d != dk:
            raise ValueError(f"q and k must share the last dim D: got {d} and {dk}")
        if d != self.head_dim:
            raise ValueError(
                f"attention {self.name!r} was built with head_dim={self.head_dim} but got D={d}"
            )
        if s != sv:
            raise ValueError(f"k and v must share the length S: got {s} and {sv}")
        if causal and l_q != s:
            raise ValueError(f"causal=True requires L == S, got L={l_q}, S={s}")
        if key_padding_mask is not None:
            if key_padding_mask.dtype != torch.bool:
                raise ValueError(
                    "key_padding_mask must be bool (True = real token), "
                    f"got {key_padding_mask.dtype}"
                )
            if tuple(key_padding_mask.shape) != (b, s):
                raise ValueError(
                    f"key_padding_mask must have shape (B, S) = {(b, s)}, "
                    f"got {tuple(key_padding_mask.shape)}"
                )


def host_reads_are_free(device: torch.device) -> bool:
    """Whether reading a tensor's value back to Python costs nothing beyond the read: on the CPU
    the op has already run; on an accelerator it waits for the launch queue to drain."""
    return device.type == "cpu"


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half types (states must not overflow), the input dtype otherwise (fp64 stays)."""
    return torch.promote_types(dtype, torch.float32)


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
