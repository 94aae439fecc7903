"""A token-in, logits-out transformer: embedding + positions + ``TransformerEncoder`` + head.

Used causally (decoder-only LM over ``x SEP y``, pixel-by-pixel image models) or bidirectionally
(an encoder that labels every position). ``step`` decodes one token at a time through the
backends' recurrent forms; ``attn_lightning.models.decoding`` drives it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast

from torch import Tensor, nn

from attn_lightning.models.positional import build_positional_encoding
from attn_lightning.models.specs import INITS, TransformerSpec
from attn_lightning.models.transformer import EncoderBlock, LayerState, TransformerEncoder

# (number of positions already consumed, one backend state per layer)
DecodeState = tuple[int, LayerState | None]


class SequenceTransformer(nn.Module):
    """``logits = W_head · LN(blocks(embed(tokens) + P))``; cost O(layers · backend(N)).

    Args:
        spec: the transformer's sizes (``models.specs.TransformerSpec``).
        vocab_size: number of input token ids.
        max_len: longest sequence (size of the positional table).
        attention: backend dict, e.g. ``{"name": "linear"}``.
        num_outputs: size of the output head (default ``vocab_size``).
        tie_embeddings: the head's weight is the embedding table (and it has no bias).
        init: ``pytorch`` (each module's own) or ``gpt2`` (``gpt2_init``).
        embed_dropout: dropout on the embeddings (token + position); None: ``spec.dropout``.

    Raises:
        ValueError: ``tie_embeddings`` with ``num_outputs`` other than ``vocab_size``; an
            unknown ``init``.
    """

    def __init__(
        self,
        spec: TransformerSpec,
        *,
        vocab_size: int,
        max_len: int,
        attention: Mapping[str, Any],
        num_outputs: int | None = None,
        tie_embeddings: bool = False,
        init: str = "pytorch",
        embed_dropout: float | None = None,
    ) -> None:
        super().__init__()
        outputs = num_outputs or vocab_size
        if tie_embeddings and outputs != vocab_size:
            raise ValueError(
                f"net.tie_embeddings needs as many outputs as input tokens (the head is the "
                f"embedding table), got {outputs} outputs and vocab_size={vocab_size}"
            )
        self.max_len = max_len
        self.embed = nn.Embedding(vocab_size, spec.d_model)
        self.positional = build_positional_encoding(spec.positional, spec.d_model, max_len=max_len)
        self.dropout = nn.Dropout(spec.dropout if embed_dropout is None else embed_dropout)
        self.encoder = TransformerEncoder(
            spec,
            num_layers=spec.num_layers,
            attention=attention,
            projections=spec.projections,
            short_conv=spec.short_conv,
            rotary=spec.rotary,
        )
        self.head = nn.Linear(spec.d_model, outputs, bias=not tie_embeddings)
        if tie_embeddings:
            self.head.weight = self.embed.weight
        if init not in INITS:
            raise ValueError(f"init must be one of {', '.join(INITS)}, got {init!r}")
        if init == "gpt2":
            gpt2_init(self)

    @property
    def supports_recurrence(self) -> bool:
        """True when every layer's backend has ``step`` (else decode by prefix recompute)."""
        return self.encoder.supports_recurrence

    def forward(
        self,
        tokens: Tensor,
        *,
        causal: bool = False,
        key_padding_mask: Tensor | None = None,
        positions: Tensor | None = None,
    ) -> Tensor:
        """``tokens: (B, L)`` long -> logits ``(B, L, num_outputs)``.

        ``positions: (B, P)`` long: the logits at those positions only, ``(B, P, num_outputs)``;
        the head then costs O(P·E·V) instead of O(L·E·V) (a large vocabulary read at a few
        positions, as in associative recall).
        """
        x = self.dropout(self.positional(self.embed(tokens)))  # (B, L, E)
        x = self.encoder(x, causal=causal, key_padding_mask=key_padding_mask)
        if positions is not None:
            x = x.gather(1, positions[..., None].expand(-1, -1, x.shape[-1]))  # (B, P, E)
        return self.head(x)

    def step(self, token: Tensor, state: DecodeState | None = None) -> tuple[Tensor, DecodeState]:
        """Consume ``token: (B,)`` at the next position; return its logits ``(B, V)`` and state.

        Equals ``forward(prefix, causal=True)[:, -1]`` for the prefix seen so far (eval mode).
        """
        position, layer_state = (0, None) if state is None else state
        x = self.positional(self.embed(token[:, None]), offset=position)  # (B, 1, E)
        x, layer_state = self.encoder.step(x, layer_state, offset=position)
        return self.head(x[:, 0]), (position + 1, layer_state)


def gpt2_init(model: SequenceTransformer, *, std: float = 0.02) -> None:
    """GPT-2's initialisation, as Zoology's ``_init_weights``: every ``nn.Linear`` and
    ``nn.Embedding`` weight (a backend's own projections too) ~ N(0, std²), biases 0, and the
    weights that end a residual branch — attention's output projection, the MLP's second layer —
    ~ N(0, std² / (2 · layers)), so the residual stream's variance does not grow with depth.
    Norms, positions (learned ones start at N(0, 0.02²) already) and convolutions keep theirs."""
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, std=std)
            bias = getattr(module, "bias", None)
            if bias is not None:
                nn.init.zeros_(bias)
    scaled = std / math.sqrt(2 * len(model.encoder.layers))
    for block in model.encoder.layers:
        attn = cast(EncoderBlock, block)
        if attn.attn.out_proj is not None:
            nn.init.normal_(attn.attn.out_proj.weight, std=scaled)
        if attn.mlp is not None:
            nn.init.normal_(cast(nn.Linear, attn.mlp[-1]).weight, std=scaled)


__all__ = ["DecodeState", "SequenceTransformer", "gpt2_init"]
