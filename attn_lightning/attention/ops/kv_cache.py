"""A preallocated KV cache for the exact backends' ``step`` (``softmax``, ``polynomial``).

The state stays what it always was, a pair of tensors holding every past key and value::

    state = (k: (B, H, T, D), v: (B, H, T, Dv))

but each is now a view ``buffer[:, :, :T]`` of a buffer ``(B, H, capacity, ·)`` allocated here,
so appending a token writes one slot instead of copying the whole cache (``torch.cat``, O(T) per
token). When the buffer is full a new one of twice the capacity is allocated and the cache copied
into it: amortised O(1) per token. The first buffer holds ``capacity`` tokens (a backend's
``cache_size`` option when the caller knows the length), ``DEFAULT_CAPACITY`` otherwise.

Why stepping a state never changes it (``Attention.step``'s contract): the new token goes to
slot T, outside the view ``[:, :, :T]`` the input state sees. The buffers record how many of
their slots hold data (the "tip"); a token is written in place only when the state ends at the
tip (T == tip). Stepping the same state a second time (several continuations from one prefix)
finds T < tip: slot T belongs to the first continuation, so the cache is copied into new buffers
instead (copy-on-write) and both continuations stay right. A written slot is never overwritten.

The buffers and the tip hang off the two returned views as a Python attribute (``_Buffers``),
not off ``Tensor._base``, which ``torch.inference_mode`` leaves unset. Hence also copied, never
written in place:

* a state this module did not return (a plain ``(k, v)`` pair built by hand, a slice of a larger
  tensor, a state cloned or moved with ``.to``): its storage may be someone else's;
* a step that autograd records (grad enabled and a tensor requires grad): an in-place write
  would change tensors the previous steps saved for backward.
"""

from __future__ import annotations

import torch
from torch import Tensor

from attn_lightning.attention.base import State

DEFAULT_CAPACITY = 32  # tokens; small, since growth is geometric anyway
GROWTH = 2  # capacity multiplier when the buffer is full: amortised O(1) copies per token

# The attribute of both tensors of a state returned here: their shared ``_Buffers``.
_ATTR = "_attn_lightning_kv_buffers"


class _Buffers:
    """The k and v buffers ``(B, H, capacity, D|Dv)`` of one cache and its tip: how many of their
    leading slots hold data. Shared by every state viewing these buffers."""

    __slots__ = ("k", "tip", "v")

    def __init__(self, k: Tensor, v: Tensor, tip: int) -> None:
        self.k, self.v, self.tip = k, v, tip

    @property
    def capacity(self) -> int:
        return self.k.shape[2]


def append(state: State | None, k: Tensor, v: Tensor, *, capacity: int | None = None) -> State:
    """The KV cache with one more token: ``(k: (B, H, T + 1, D), v: (B, H, T + 1, Dv))``.

    Args:
        state: the cache so far, ``(k, v)`` with T tokens (from this function or any plain
            pair of tensors), or None before the first token. Never modified (module docstring).
        k: ``(B, H, 1, D)``, the new key; stored in the dtype of the cache (its own at first).
        v: ``(B, H, 1, Dv)``, the new value.
        capacity: tokens the first buffer holds (None: ``DEFAULT_CAPACITY``); a hint only, the
            cache grows past it.

    Returns:
        The new state: views of the first T + 1 slots of the (possibly new) buffers.
    """
    if capacity is not None and capacity < 1:
        raise ValueError(f"KV cache capacity must be a positive int or None, got {capacity!r}")
    if state is None:
        empty_k, empty_v = k[:, :, :0], v[:, :, :0]  # (B, H, 0, D|Dv): nothing to copy yet
        return _write(_new_buffers(empty_k, empty_v, capacity or DEFAULT_CAPACITY), k, v)
    if len(state) != 2:
        raise ValueError(f"a KV cache state is (k, v), got a tuple of {len(state)} tensors")
    cache_k, cache_v = state
    length = cache_k.shape[2]
    if torch.is_grad_enabled() and any(t.requires_grad for t in (cache_k, cache_v, k, v)):
        # Out of place, as autograd needs; the next step copies again (no spare capacity).
        new_k = torch.cat([cache_k, k.to(cache_k.dtype)], dim=2)  # (B, H, T + 1, D)
        return new_k, torch.cat([cache_v, v.to(cache_v.dtype)], dim=2)  # (B, H, T + 1, Dv)
    buffers = _buffers_of(cache_k, cache_v)
    if (
        buffers is None  # not a state returned here
        or buffers.tip != length  # stepped before: slot T holds another continuation's token
        or length == buffers.capacity  # full
    ):
        # Copy into new buffers: grow geometrically, or copy-on-write (module docstring).
        buffers = _new_buffers(cache_k, cache_v, max(GROWTH * length, length + 1, capacity or 0))
    return _write(buffers, k, v)


def from_prefix(k: Tensor, v: Tensor, *, capacity: int | None = None) -> State:
    """A KV cache holding ``k: (B, H, T, D)`` and ``v: (B, H, T, Dv)`` (e.g. a prompt's keys and
    values, or a benchmark's context) with room for ``capacity`` tokens in all (default 2T), so
    the next ``capacity - T`` steps append in place."""
    length = k.shape[2]
    if v.shape[2] != length:
        raise ValueError(f"k and v must share the length T: got {length} and {v.shape[2]}")
    return _views(_new_buffers(k, v, max(capacity or GROWTH * length, length, 1)), length)


def _new_buffers(k: Tensor, v: Tensor, capacity: int) -> _Buffers:
    """Fresh buffers of ``max(capacity, T)`` slots whose first T hold ``k, v: (B, H, T, ·)``."""
    b, h, length, d = k.shape
    capacity = max(capacity, length)
    buffer_k = k.new_empty(b, h, capacity, d)  # (B, H, capacity, D)
    buffer_v = v.new_empty(b, h, capacity, v.shape[3])  # (B, H, capacity, Dv)
    buffer_k[:, :, :length].copy_(k)
    buffer_v[:, :, :length].copy_(v)
    return _Buffers(buffer_k, buffer_v, length)


def _write(buffers: _Buffers, k: Tensor, v: Tensor) -> State:
    """Write the token into slot T = tip (outside every older state's view); the new state."""
    length = buffers.tip
    buffers.k[:, :, length : length + 1].copy_(k)  # casts to the cache's dtype
    buffers.v[:, :, length : length + 1].copy_(v)
    buffers.tip = length + 1
    return _views(buffers, length + 1)


def _views(buffers: _Buffers, length: int) -> State:
    """The state ``(k: (B, H, T, D), v: (B, H, T, Dv))`` of the first T slots, which remembers
    its buffers."""
    view_k, view_v = buffers.k[:, :, :length], buffers.v[:, :, :length]
    setattr(view_k, _ATTR, buffers)
    setattr(view_v, _ATTR, buffers)
    return view_k, view_v


def _buffers_of(cache_k: Tensor, cache_v: Tensor) -> _Buffers | None:
    """The buffers of a state returned here; None for any other pair of tensors."""
    buffers = getattr(cache_k, _ATTR, None)
    if getattr(cache_v, _ATTR, None) is not buffers:  # k and v from different caches
        return None
    if not isinstance(buffers, _Buffers):
        return None
    # Still the leading slots of those buffers (not, say, resized in place since).
    for view, buffer in ((cache_k, buffers.k), (cache_v, buffers.v)):
        if view.data_ptr() != buffer.data_ptr() or view.stride() != buffer.stride():
            return None
    return buffers
