"""No backend reads a tensor back to the host in a training forward + backward (default options).

A read (``bool(t)``, ``t.item()``, ``int(t)``) dispatches ``aten._local_scalar_dense``: on a GPU a
device-to-host sync that stalls the launch queue once per layer per step. Counted on the CPU with a
``TorchDispatchMode``, which sees every aten call the same code makes on CUDA, with
``host_reads_are_free`` answering as it does for a CUDA tensor (on the CPU itself the causal guard
reads one probe on purpose: it is free there). The second step is counted: a backend may read a
host mirror of a buffer once (optimization's random-token counter).
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from attn_lightning.attention import available_attentions, base, build_attention

READS = {torch.ops.aten._local_scalar_dense.default, torch.ops.aten.is_nonzero.default}
READS.add(torch.ops.aten.item.default)


class _HostReads(TorchDispatchMode):
    """Records every aten call that returns a tensor's value to Python."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in READS:
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


def _step(attn, causal: bool) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 8, generator=g).requires_grad_() for _ in range(3))
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 5:] = False
    attn(q, k, v, causal=causal, key_padding_mask=mask).square().sum().backward()


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("name", available_attentions())
def test_training_step_never_reads_a_tensor_on_the_host(name, causal, monkeypatch):
    monkeypatch.setattr(base, "host_reads_are_free", lambda device: False)  # as for CUDA
    torch.manual_seed(0)
    attn = build_attention(name, head_dim=8).train()
    if causal and not attn.supports_causal:
        pytest.skip(f"{name} has no causal form")
    _step(attn, causal)
    with _HostReads() as mode:
        _step(attn, causal)
    assert mode.reads == []


def test_optimization_counter_is_read_again_after_a_load():
    torch.manual_seed(0)
    attn = build_attention("optimization", head_dim=8).train()
    state = {k: t.clone() for k, t in attn.state_dict().items()}
    _step(attn, False)
    assert int(attn.draws) == 1
    attn.load_state_dict(state)  # draws back to 0: the host copy must not be trusted
    with _HostReads() as mode:
        _step(attn, False)
    assert len(mode.reads) == 2 and int(attn.draws) == 1


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_the_causal_guard_gives_the_same_outputs_and_grads_with_and_without_host_reads(
    bad, monkeypatch
):
    # The CPU's probe-and-branch and the device-only masks: the same contract, the same numbers.
    attn = build_attention("linear", head_dim=8)
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 2, 8, 8, generator=g) for _ in range(3))
    k[1, 0, 5, 3] = bad
    got = []
    for free in (True, False):
        monkeypatch.setattr(base, "host_reads_are_free", lambda device, free=free: free)
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = attn(*leaves, causal=True)
        out[:, :, :5].sum().backward()  # the rows before the bad key: finite, as are their grads
        got.append((out, *(t.grad for t in leaves)))
    for a, b in zip(*got, strict=True):
        torch.testing.assert_close(a, b, equal_nan=True)
    out = got[0][0]
    assert out[1, 0, 5:].isnan().all() and out[:, :, :5].isfinite().all()
    assert all(t.isfinite().all() for t in got[0][1:])
