"""The preallocated KV cache: appends in place, grows ×2, never changes a state it was given."""

from __future__ import annotations

import pytest
import torch

from attn_lightning.attention.ops import kv_cache


def tokens(n, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(2, 3, n, 4, generator=g, dtype=dtype)
    v = torch.randn(2, 3, n, 5, generator=g, dtype=dtype)
    return k, v


def fill(k, v, capacity=None, state=None):
    states = []
    for t in range(k.shape[2]):
        state = kv_cache.append(state, k[:, :, t : t + 1], v[:, :, t : t + 1], capacity=capacity)
        states.append(state)
    return states


def capacity_of(state):
    return kv_cache._buffers_of(*state).capacity


def test_appends_in_place_and_doubles_when_full():
    k, v = tokens(11)
    states = fill(k, v, capacity=4)
    assert [capacity_of(s) for s in states] == [4] * 4 + [8] * 4 + [16] * 3
    for t, (ck, cv) in enumerate(states, start=1):
        assert ck.shape == (2, 3, t, 4) and cv.shape == (2, 3, t, 5)
        torch.testing.assert_close(ck, k[:, :, :t], rtol=0, atol=0)
        torch.testing.assert_close(cv, v[:, :, :t], rtol=0, atol=0)
    # Between growths every state is a view of the same buffer: no copy.
    assert states[4][0].data_ptr() == states[7][0].data_ptr() != states[3][0].data_ptr()


def test_default_capacity_and_hint():
    k, v = tokens(1)
    assert capacity_of(fill(k, v)[0]) == kv_cache.DEFAULT_CAPACITY
    assert capacity_of(fill(k, v, capacity=100)[0]) == 100
    with pytest.raises(ValueError, match="capacity"):
        kv_cache.append(None, k, v, capacity=0)


def test_stepping_a_state_twice_branches_by_copy_on_write():
    k, v = tokens(6)
    prefix = fill(k[:, :, :3], v[:, :, :3], capacity=16)[-1]
    first = fill(k[:, :, 3:], v[:, :, 3:], state=prefix)[-1]  # writes slots 3..5 in place
    other_k, other_v = tokens(2, seed=1)
    second = fill(other_k, other_v, state=prefix)[-1]  # slot 3 is taken: copied
    assert first[0].data_ptr() == prefix[0].data_ptr() != second[0].data_ptr()
    torch.testing.assert_close(first[0], k, rtol=0, atol=0)
    torch.testing.assert_close(first[1], v, rtol=0, atol=0)
    torch.testing.assert_close(second[0], torch.cat([k[:, :, :3], other_k], dim=2))
    torch.testing.assert_close(second[1], torch.cat([v[:, :, :3], other_v], dim=2))
    torch.testing.assert_close(prefix[0], k[:, :, :3], rtol=0, atol=0)
    # The first branch can still go on, and in place: it owns the tip of its buffer.
    more = kv_cache.append(first, other_k[:, :, :1], other_v[:, :, :1])
    assert more[0].data_ptr() == first[0].data_ptr()
    torch.testing.assert_close(more[0][:, :, 6], other_k[:, :, 0], rtol=0, atol=0)


def test_a_cloned_state_is_copied_not_written():
    k, v = tokens(5)
    state = fill(k[:, :, :4], v[:, :, :4], capacity=16)[-1]
    clone = tuple(t.clone() for t in state)
    for seed in (1, 2):  # the clone stepped twice: two independent continuations
        extra_k, extra_v = tokens(1, seed=seed)
        new = kv_cache.append(clone, extra_k, extra_v)
        torch.testing.assert_close(new[0], torch.cat([k[:, :, :4], extra_k], dim=2))
        torch.testing.assert_close(new[1], torch.cat([v[:, :, :4], extra_v], dim=2))
    torch.testing.assert_close(clone[0], k[:, :, :4], rtol=0, atol=0)


def test_a_plain_pair_is_never_written_into():
    # A cache sliced from a larger tensor: appending in place would overwrite position 3.
    k, v = tokens(6)
    before_k, before_v = k.clone(), v.clone()
    new = kv_cache.append((k[:, :, :3], v[:, :, :3]), k[:, :, 5:], v[:, :, 5:])
    torch.testing.assert_close(k, before_k, rtol=0, atol=0)
    torch.testing.assert_close(v, before_v, rtol=0, atol=0)
    torch.testing.assert_close(new[0][:, :, 3], k[:, :, 5], rtol=0, atol=0)
    assert capacity_of(new) == 2 * 3  # regrown with room, then in place
    assert kv_cache.append(new, k[:, :, :1], v[:, :, :1])[0].data_ptr() == new[0].data_ptr()


def test_from_prefix_leaves_room():
    k, v = tokens(5)
    state = kv_cache.from_prefix(k, v, capacity=7)
    assert state[0].shape == (2, 3, 5, 4) and capacity_of(state) == 7
    assert capacity_of(kv_cache.from_prefix(k, v)) == 10
    torch.testing.assert_close(state[1], v, rtol=0, atol=0)
    assert kv_cache.append(state, k[:, :, :1], v[:, :, :1])[0].data_ptr() == state[0].data_ptr()
    with pytest.raises(ValueError, match="length"):
        kv_cache.from_prefix(k, v[:, :, :4])


def test_keeps_the_cache_dtype():
    k, v = tokens(2, dtype=torch.float32)
    state = fill(k[:, :, :1], v[:, :, :1])[-1]
    new = kv_cache.append(state, k[:, :, 1:].double(), v[:, :, 1:].half())
    assert new[0].dtype == new[1].dtype == torch.float32
    torch.testing.assert_close(new[0], k, rtol=0, atol=0)


def test_out_of_place_when_autograd_records():
    k, v = tokens(3)
    k.requires_grad_(True)
    state = None
    for t in range(3):
        state = kv_cache.append(state, k[:, :, t : t + 1], v[:, :, t : t + 1])
    state[0].sum().backward()  # no "modified by an inplace operation" error
    torch.testing.assert_close(k.grad, torch.ones_like(k))


def test_in_place_under_inference_mode():
    # inference_mode leaves Tensor._base unset: the cache must not depend on it.
    k, v = tokens(9)
    with torch.inference_mode():
        states = fill(k, v, capacity=4)
    assert states[4][0].data_ptr() == states[7][0].data_ptr()
    assert capacity_of(states[-1]) == 16
    torch.testing.assert_close(states[-1][1], v, rtol=0, atol=0)


def test_rejects_other_states():
    k, v = tokens(1)
    with pytest.raises(ValueError, match=r"\(k, v\)"):
        kv_cache.append((k, v, k), k, v)
