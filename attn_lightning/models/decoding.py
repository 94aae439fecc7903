"""Autoregressive decoding for any causal token model: recurrent ``step`` or prefix recompute.

A decodable model (``SequenceTransformer`` is one) provides::

    model(tokens, causal=True) -> (B, L, V)        # outputs for every prefix position
    model.step(token, state) -> ((B, V), state)    # one position; state returned, never stored
    model.supports_recurrence -> bool

``step`` costs O(1) per token for linear-attention backends (O(t) for softmax's KV cache);
prefix recompute runs the full causal forward on the growing prefix, O(t · cost(forward)) in
total, and works for every causal backend. Both give the same tokens; the tests check it.
The sampler turns the last position's output ``(B, V)`` into the next token ``(B,)``, so image
models with their own output distribution plug in their own sampler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import torch
from torch import Tensor

Sampler = Callable[[Tensor], Tensor]
METHODS = ("auto", "step", "recompute")


class Decodable(Protocol):
    @property
    def supports_recurrence(self) -> bool: ...

    def __call__(self, tokens: Tensor, *, causal: bool) -> Tensor: ...

    def step(self, token: Tensor, state: Any) -> tuple[Tensor, Any]: ...


def greedy(logits: Tensor) -> Tensor:
    """argmax over the last dim: ``(B, V) -> (B,)``."""
    return logits.argmax(dim=-1)


def categorical(
    *, temperature: float = 1.0, top_k: int | None = None, generator: torch.Generator | None = None
) -> Sampler:
    """Sample from ``softmax(logits / temperature)``, optionally restricted to the top k."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (use greedy for argmax), got {temperature!r}")
    if top_k is not None and top_k <= 0:
        raise ValueError(f"top_k must be a positive int or None, got {top_k!r}")

    def sample(logits: Tensor) -> Tensor:
        logits = logits.float() / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = logits.softmax(dim=-1)
        on_cpu = generator is not None and generator.device.type == "cpu"
        drawn = torch.multinomial(probs.cpu() if on_cpu else probs, 1, generator=generator)
        return drawn[:, 0].to(logits.device)

    return sample


@torch.no_grad()
def generate(
    model: Decodable,
    prompt: Tensor,
    num_tokens: int,
    *,
    sampler: Sampler = greedy,
    method: str = "auto",
) -> Tensor:
    """Continue ``prompt: (B, P)`` (P >= 1) by ``num_tokens`` tokens -> ``(B, num_tokens)``.

    Args:
        model: a decodable model (see the module docstring); its train/eval mode is left as is.
        prompt: conditioning tokens, at least one (e.g. a start or separator token).
        num_tokens: how many tokens to generate.
        sampler: ``greedy`` (default) or ``categorical(...)``.
        method: ``step`` (recurrent), ``recompute`` (prefix), or ``auto``: step when
            ``model.supports_recurrence``, else recompute.
    """
    if method not in METHODS:
        raise ValueError(f"unknown decoding method {method!r}; allowed: {', '.join(METHODS)}")
    if prompt.dim() != 2 or prompt.shape[1] < 1:
        raise ValueError(f"prompt must be (B, P) with P >= 1, got shape {tuple(prompt.shape)}")
    if method == "auto":
        method = "step" if model.supports_recurrence else "recompute"
    if method == "step" and not model.supports_recurrence:
        raise ValueError("method='step' needs a model whose backends all support recurrence")
    if method == "step":
        return _by_step(model, prompt, num_tokens, sampler)
    return _by_recompute(model, prompt, num_tokens, sampler)


def _by_step(model: Decodable, prompt: Tensor, num_tokens: int, sampler: Sampler) -> Tensor:
    state = None
    for t in range(prompt.shape[1]):
        logits, state = model.step(prompt[:, t], state)  # (B, V)
    out = []
    for i in range(num_tokens):
        token = sampler(logits)  # (B,)
        out.append(token)
        if i + 1 < num_tokens:  # the last token's output is never needed
            logits, state = model.step(token, state)
    return _stack(out, prompt)


def _by_recompute(model: Decodable, prompt: Tensor, num_tokens: int, sampler: Sampler) -> Tensor:
    seq = prompt
    for _ in range(num_tokens):
        logits = model(seq, causal=True)[:, -1]  # (B, V)
        seq = torch.cat([seq, sampler(logits)[:, None].to(seq.dtype)], dim=1)  # (B, t + 1)
    return seq[:, prompt.shape[1] :]


def _stack(tokens: list[Tensor], prompt: Tensor) -> Tensor:
    if not tokens:
        return prompt.new_empty(prompt.shape[0], 0)
    return torch.stack(tokens, dim=1).to(prompt.dtype)  # (B, num_tokens)
