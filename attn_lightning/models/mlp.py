"""The small classifier adapted with LoRA: flattened image -> hidden ReLU layers -> class logits.

Layers are ``nn.Linear`` named ``fc1 .. fc{k+1}`` (the last one is the head), so peft's
``LoraConfig(target_modules=["fc1", "fc2", "fc3"])`` and ``modules_to_save=["fc3"]`` address
them by name. With the default sizes (784-64-64-10, 28×28 inputs) it has 55,050 parameters.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from torch import Tensor, nn


class MLP(nn.Module):
    """``logits = fc_{k+1}(ReLU(fc_k(… ReLU(fc_1(flatten(x))))))``; cost O(Σ d_i·d_{i+1}) per input.

    The baseline network of the LoRA study (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
    Language Models", adapted to an MNIST-sized MLP).

    Args:
        input_size: features per input after flattening (H·W for images).
        hidden_sizes: widths of the hidden layers, in order.
        num_classes: outputs of the head.
    """

    def __init__(
        self,
        *,
        input_size: int = 784,
        hidden_sizes: Sequence[int] = (64, 64),
        num_classes: int = 10,
    ) -> None:
        super().__init__()
        sizes = [input_size, *hidden_sizes, num_classes]
        bad = [s for s in sizes if not isinstance(s, int) or s <= 0]
        if bad:
            raise ValueError(
                f"MLP sizes must be positive ints, got input_size={input_size!r}, "
                f"hidden_sizes={list(hidden_sizes)!r}, num_classes={num_classes!r}"
            )
        self.input_size = input_size
        self.num_layers = len(sizes) - 1
        for index, (fan_in, fan_out) in enumerate(itertools.pairwise(sizes), 1):
            self.add_module(f"fc{index}", nn.Linear(fan_in, fan_out))
        self.activation = nn.ReLU()

    @property
    def layer_names(self) -> list[str]:
        """``["fc1", ..., "fc{k+1}"]``; the last name is the head."""
        return [f"fc{i}" for i in range(1, self.num_layers + 1)]

    @property
    def head_name(self) -> str:
        return self.layer_names[-1]

    def forward(self, x: Tensor) -> Tensor:
        """``x: (B, ...)`` with ``input_size`` features per row -> logits ``(B, num_classes)``."""
        x = x.flatten(1)  # (B, input_size)
        if x.shape[1] != self.input_size:
            raise ValueError(
                f"MLP expects {self.input_size} input features, got {x.shape[1]} "
                f"(input shape {tuple(x.shape)})"
            )
        for name in self.layer_names[:-1]:
            x = self.activation(getattr(self, name)(x))  # (B, hidden)
        return getattr(self, self.head_name)(x)  # (B, num_classes)


__all__ = ["MLP"]
