"""Causal pixel transformer: p(x) = Π_i p(x_i | x_<i) over pixels in raster order.

The input is ``[START, x_0, …, x_{N−2}]`` (START = ``levels``, an extra token id), position i
predicts ``x_i``; so the model is a ``SequenceTransformer`` with ``levels + 1`` input ids and an
output distribution over ``levels`` values (categorical or a discretised logistic mixture,
``models/logistic_mixture.py``). ``forward`` and ``step`` return normalised log-probabilities,
which makes it a decodable model for ``models/decoding.py``: recurrent ``step`` (O(1) state per
layer for kernel backends, a KV cache for softmax) or prefix recompute.

Katharopoulos et al. 2020 ("Transformers are RNNs", arXiv 2006.16236) §4.2.1: MNIST 784 pixels,
8 layers, 8 heads × 32, FFN 1024, a mixture of 10 logistics.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor, nn

from attn_lightning.models.decoding import categorical, generate
from attn_lightning.models.logistic_mixture import build_output
from attn_lightning.models.sequence import DecodeState, SequenceTransformer
from attn_lightning.models.specs import PixelSpec


class PixelTransformer(nn.Module):
    """Autoregressive density over ``seq_len`` pixels with ``levels`` values each.

    ``log p(x_i | x_<i) = out(W_head · LN(blocks(embed([START, x_<i]) + P)))``; cost per forward
    O(layers · backend(N)), per ``step`` O(layers · state).

    Args:
        spec: the model's sizes and output distribution (``models.specs.PixelSpec``).
        levels: pixel values 0..levels−1 (START is token ``levels``).
        seq_len: pixels per image (H·W); the positional table's size.
        attention: backend dict, e.g. ``{"name": "linear"}``.
    """

    def __init__(
        self,
        spec: PixelSpec,
        *,
        levels: int,
        seq_len: int,
        attention: Mapping[str, Any],
    ) -> None:
        super().__init__()
        if levels < 2 or seq_len < 1:
            raise ValueError(f"levels must be >= 2 and seq_len >= 1, got {levels}, {seq_len}")
        self.levels = levels
        self.seq_len = seq_len
        self.start = levels  # START token id, after the pixel values
        self.output = build_output(spec.output, levels=levels, num_mixtures=spec.num_mixtures)
        self.net = SequenceTransformer(
            spec,
            vocab_size=levels + 1,
            num_outputs=self.output.num_params,
            max_len=seq_len,
            attention=attention,
        )

    @property
    def supports_recurrence(self) -> bool:
        return self.net.supports_recurrence

    def forward(self, tokens: Tensor, *, causal: bool = True) -> Tensor:
        """``tokens: (B, L)`` = ``[START, x_0, …]`` -> log-probabilities ``(B, L, levels)``."""
        if not causal:
            raise ValueError("a pixel model is autoregressive: causal must be True")
        return self.output(self.net(tokens, causal=True))

    def step(self, token: Tensor, state: DecodeState | None = None) -> tuple[Tensor, DecodeState]:
        """Consume ``token: (B,)``; log-probabilities ``(B, levels)`` of the next pixel, state."""
        params, state = self.net.step(token, state)  # (B, num_params)
        return self.output(params), state

    def inputs(self, pixels: Tensor) -> Tensor:
        """``pixels: (B, N)`` -> teacher-forced inputs ``[START, x_0, …, x_{N−2}]`` ``(B, N)``."""
        start = pixels.new_full((pixels.shape[0], 1), self.start)
        return torch.cat([start, pixels[:, :-1]], dim=1)

    def log_likelihood(self, pixels: Tensor) -> Tensor:
        """``log p(x_i | x_<i)`` in nats, ``(B, N)``."""
        # The target's entry alone (``output.log_prob``), not all ``levels`` then a gather.
        params = self.net(self.inputs(pixels), causal=True)  # (B, N, num_params)
        return self.output.log_prob(params, pixels)


def bits_per_dim(log_likelihood: Tensor) -> Tensor:
    """Mean negative log-likelihood in bits: ``−mean(log p) / ln 2`` over every element."""
    return -log_likelihood.mean() / math.log(2.0)


@torch.no_grad()
def sample_pixels(
    model: PixelTransformer,
    *,
    observed: Tensor,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    method: str = "auto",
) -> Tensor:
    """Complete ``observed: (B, k)`` (k ≥ 0 first pixels) to full images ``(B, seq_len)``.

    k = 0 is unconditional sampling; the rest is drawn from ``p^(1/temperature)`` renormalised,
    by ``generate`` (``method``: ``step``, ``recompute`` or ``auto``). A seeded ``generator``
    makes the draw reproducible, and identical across methods up to float rounding.
    """
    k = observed.shape[1]
    if not 0 <= k < model.seq_len:
        raise ValueError(f"observed pixels must be in [0, {model.seq_len}), got {k}")
    start = observed.new_full((observed.shape[0], 1), model.start)
    prompt = torch.cat([start, observed], dim=1)  # (B, k + 1)
    sampler = categorical(temperature=temperature, generator=generator)
    rest = generate(model, prompt, model.seq_len - k, sampler=sampler, method=method)
    return torch.cat([observed, rest], dim=1)  # (B, seq_len)
