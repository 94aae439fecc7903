"""Output distributions over quantised pixel levels: categorical, or a discretised logistic mixture.

Both turn a network's raw outputs ``(..., num_params)`` into normalised log-probabilities over the
``levels`` pixel values ``(..., levels)``, from which a sampler draws (so
``generation.categorical`` samples either distribution, temperature included). ``log_prob`` gives
the target's entry alone: the same number, but the mixture evaluates K logistics at one bin instead
of all ``levels`` (at 784 pixels × 256 levels, all of them cost more than the transformer).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

OUTPUTS = ("categorical", "logistic_mixture")
_MIN_LOG_SCALE = -7.0  # PixelCNN++'s floor: a narrower logistic than a bin adds nothing
_TINY_BIN = 1e-5  # below this mass the CDF difference is all rounding; use the density instead


class CategoricalOutput(nn.Module):
    """``log p(v) = log_softmax(logits)_v`` over ``levels`` values; ``levels`` parameters."""

    def __init__(self, *, levels: int) -> None:
        super().__init__()
        self.levels = levels
        self.num_params = levels

    def forward(self, params: Tensor) -> Tensor:
        """``params: (..., levels)`` -> log-probabilities ``(..., levels)``."""
        return _at_least_float32(params).log_softmax(dim=-1)

    def log_prob(self, params: Tensor, values: Tensor) -> Tensor:
        """``log p(values)`` ``(...)`` for ``params: (..., levels)``, integer ``values: (...)``."""
        return self(params).gather(-1, values[..., None])[..., 0]


class DiscretizedLogisticMixture(nn.Module):
    """Mixture of K logistics discretised to ``levels`` bins (Salimans et al. 2017, PixelCNN++).

    ``p(v) = Σ_k π_k [σ((c_v + δ − μ_k)/s_k) − σ((c_v − δ − μ_k)/s_k)]`` with bin centres
    ``c_v = 2v/(levels − 1) − 1`` and half-width ``δ = 1/(levels − 1)``; the first and last bins
    extend to −∞ and +∞ so the mass sums to 1. The network outputs ``3K`` numbers per position:
    mixture logits, means ``μ_k`` and log-scales ``log s_k`` (floored at −7). Cost O(K·levels)
    per position. Katharopoulos et al. 2020 use K = 10 for MNIST.

    Args:
        levels: number of pixel values.
        num_mixtures: K.
    """

    centres: Tensor  # buffer, declared for the type checker

    def __init__(self, *, levels: int, num_mixtures: int = 10) -> None:
        super().__init__()
        if num_mixtures <= 0:
            raise ValueError(f"num_mixtures must be a positive int, got {num_mixtures!r}")
        self.levels = levels
        self.num_mixtures = num_mixtures
        self.num_params = 3 * num_mixtures
        centres = torch.linspace(-1.0, 1.0, levels, dtype=torch.float64)  # (levels,)
        self.register_buffer("centres", centres, persistent=False)
        self.half_width = 1.0 / (levels - 1)

    def forward(self, params: Tensor) -> Tensor:
        """``params: (..., 3K)`` -> log-probabilities ``(..., levels)``."""
        logits, means, log_scales = _split(params)  # each (..., K)
        centres = self.centres.to(means.dtype)  # (levels,)
        log_cdf_upper, log_survival_lower, inner = self._log_mass(
            centres - means[..., None], log_scales[..., None]
        )  # each (..., K, levels)
        log_bins = torch.cat(
            [log_cdf_upper[..., :1], inner[..., 1:-1], log_survival_lower[..., -1:]], dim=-1
        )
        return torch.logsumexp(log_bins + logits.log_softmax(dim=-1)[..., None], dim=-2)

    def log_prob(self, params: Tensor, values: Tensor) -> Tensor:
        """``log p(values)`` ``(...)`` for ``params: (..., 3K)`` and integer ``values: (...)``:
        ``forward(params)`` gathered at ``values``, in O(K) per position instead of O(K·levels)."""
        logits, means, log_scales = _split(params)  # each (..., K)
        centre = self.centres.to(means.dtype)[values][..., None]  # (..., 1)
        log_cdf_upper, log_survival_lower, inner = self._log_mass(centre - means, log_scales)
        first, last = (values == 0)[..., None], (values == self.levels - 1)[..., None]
        log_bin = torch.where(first, log_cdf_upper, torch.where(last, log_survival_lower, inner))
        return torch.logsumexp(log_bin + logits.log_softmax(dim=-1), dim=-1)

    def _log_mass(self, centred: Tensor, log_scales: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Per component, the log mass of the bin whose centre is ``centred`` from the mean:
        ``(−∞, c + δ]`` (the first bin), ``(c − δ, ∞)`` (the last) and ``(c − δ, c + δ]``."""
        inv_scale = torch.exp(-log_scales)
        upper = (centred + self.half_width) * inv_scale
        lower = (centred - self.half_width) * inv_scale
        log_cdf_upper = -F.softplus(-upper)  # log σ(upper)
        log_survival_lower = -F.softplus(lower)  # log(1 − σ(lower))
        mass = torch.sigmoid(upper) - torch.sigmoid(lower)
        mid = centred * inv_scale
        # log density at the centre times the bin width: the limit of a tiny bin's mass.
        log_density = mid - log_scales - 2.0 * F.softplus(mid) + math.log(2 * self.half_width)
        inner = torch.where(mass > _TINY_BIN, torch.log(mass.clamp(min=1e-12)), log_density)
        return log_cdf_upper, log_survival_lower, inner


def _split(params: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``(..., 3K)`` -> mixture logits, means, log-scales (floored), each ``(..., K)``."""
    logits, means, log_scales = _at_least_float32(params).chunk(3, dim=-1)
    return logits, means, log_scales.clamp(min=_MIN_LOG_SCALE)


def _at_least_float32(x: Tensor) -> Tensor:
    # Log-probabilities of 256 levels lose too much in bf16/fp16; float64 stays float64.
    return x if x.dtype == torch.float64 else x.float()


def build_output(
    kind: str, *, levels: int, num_mixtures: int = 10
) -> CategoricalOutput | DiscretizedLogisticMixture:
    """``kind`` in ``OUTPUTS``; raises ValueError naming the allowed ones."""
    if kind == "categorical":
        return CategoricalOutput(levels=levels)
    if kind == "logistic_mixture":
        return DiscretizedLogisticMixture(levels=levels, num_mixtures=num_mixtures)
    raise ValueError(f"unknown output distribution {kind!r}; allowed: {', '.join(OUTPUTS)}")
