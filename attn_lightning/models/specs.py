"""Model sizes stated once: the typed specs the models are built from and the tasks take.

A task (``attn_lightning.tasks``) takes its model's sizes as one argument, ``net``, typed by the
spec of its model; the model's constructor takes the same spec. Sizes that belong to the data
(vocabulary, image side, classes) are not in a spec: the CLI links them from the DataModule.
In YAML a spec is a mapping under ``model.init_args.net``::

    model:
      class_path: attn_lightning.tasks.SequenceReversalTask
      init_args:
        net: {d_model: 128, num_layers: 4}

Checkpoints save a spec as a plain dict (``spec_dict``), so they load with ``weights_only=True``;
``as_spec`` turns that dict (or a YAML mapping) back into the spec, naming any unknown key.

Every spec checks its sizes when it is made (``check_sizes``): a negative width or a stack of no
layers is one ``ValueError`` naming ``net.<size>`` while the CLI parses the config, not a
tensor-shape traceback deep in a constructor or, for ``num_layers: 0``, a model that trains with
no attention at all.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from attn_lightning.attention.ops.rotary import BASE, check_rotary_base
from attn_lightning.models.multihead import Projections
from attn_lightning.models.transformer import BlockSizes

# The smallest value of each integer size, wherever a spec has it. 0 layers is allowed only where
# it is a known ablation (DETR without an encoder; d_ff 0, blocks without an MLP); a model needs
# at least one attention block.
INITS = ("pytorch", "gpt2")  # SequenceSpec.init
MINIMUM: dict[str, int] = {
    "d_model": 1,
    "num_heads": 1,
    "head_dim": 1,
    "d_ff": 0,  # attention-only blocks: Zoology's MQAR models, Olsson et al.'s induction heads
    "num_layers": 1,
    "short_conv": 0,
    "max_len": 1,
    "num_mixtures": 1,
    "patch_size": 1,
    "num_queries": 1,
    "num_encoder_layers": 0,
    "num_decoder_layers": 1,
    "backbone_width": 1,
    "backbone_stages": 1,
}


def check_sizes(spec: Any) -> None:
    """Refuse a spec whose sizes cannot build a model (``MINIMUM``, dropouts in [0, 1),
    ``d_model`` a multiple of ``num_heads`` unless ``head_dim`` is given, ``num_heads ·
    head_dim = d_model`` without Q and K projections, hidden widths >= 1).

    Raises:
        ValueError: naming the first bad size as ``net.<name>``, the value and what is allowed.
    """
    values = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}
    for name, value in values.items():
        low = MINIMUM.get(name)
        # bool is an int: a wrong type is the parser's to report, not a size out of range.
        is_int = isinstance(value, int) and not isinstance(value, bool)
        if low is not None and is_int and value < low:
            raise ValueError(f"net.{name} must be >= {low}, got {value}")
    for name in ("dropout", "embed_dropout"):
        dropout = values.get(name)
        if isinstance(dropout, int | float) and not 0 <= dropout < 1:
            raise ValueError(f"net.{name} must be in [0, 1), got {dropout}")
    d_model, heads = values.get("d_model"), values.get("num_heads")
    head_dim, projections = values.get("head_dim"), values.get("projections", True)
    if isinstance(d_model, int) and isinstance(heads, int):
        if head_dim is None and d_model % heads:
            raise ValueError(
                f"net.d_model ({d_model}) must be a multiple of net.num_heads ({heads}): "
                "head_dim = d_model / num_heads (or give net.head_dim)"
            )
        if isinstance(head_dim, int) and projections is not True and heads * head_dim != d_model:
            raise ValueError(
                f"net.head_dim ({head_dim}) × net.num_heads ({heads}) must equal net.d_model "
                f"({d_model}) with net.projections {projections!r}: without Q and K projections "
                "the heads are cut from the inputs"
            )
    hidden = values.get("hidden_sizes")
    if hidden is not None and any(not isinstance(h, int) or h < 1 for h in hidden):
        raise ValueError(f"net.hidden_sizes must all be >= 1, got {list(hidden)}")


@dataclass(frozen=True)
class TransformerSpec(BlockSizes):
    """A pre-norm transformer stack (``models.transformer.TransformerEncoder``): the block sizes
    (``d_model``, ``num_heads``, ``d_ff``, ``dropout``) and

    Attributes:
        num_layers: encoder blocks.
        positional: ``sinusoidal``, ``learned``, ``rotary`` (nothing added to the embeddings;
            every self-attention turns q and k by their positions, RoPE:
            ``attention.ops.rotary``; each head's width even) or ``none`` (no position encoding:
            order from the causal mask alone, as Zoology's non-attention models and Based's MQAR
            models).
        rotary_base: θ_i = rotary_base^{-2i/D} of ``positional: rotary`` (RoFormer's 10000;
            long-context models raise it, LLaMA 3's is 500000), a number > 1.
        projections: ``true`` (Q, K, V, out), ``no_qk`` (V, out) or ``false`` (none).
        short_conv: K of a short causal convolution (and SiLU) on q, k and v in every layer,
            as GLA's and DeltaNet's (fla's ``conv_size`` 4); 0: none (``models.short_conv``).
    """

    num_layers: int = 2
    positional: str = "sinusoidal"
    projections: Projections = True
    short_conv: int = 0
    rotary_base: float = BASE

    def __post_init__(self) -> None:
        check_sizes(self)
        check_rotary_base(self.rotary_base, option="net.rotary_base")
        if self.rotary_base != BASE and self.positional != "rotary":
            raise ValueError(
                f"net.rotary_base ({self.rotary_base}) is the base of net.positional rotary, "
                f"but net.positional is {self.positional!r}: set net.positional rotary, or "
                f"leave net.rotary_base at {BASE:g}"
            )
        width = self.head_dim or self.d_model // self.num_heads
        if self.rotary is not None and width % 2:
            where = "net.head_dim" if self.head_dim else "net.d_model / net.num_heads"
            raise ValueError(
                f"net.positional rotary turns pairs of coordinates: each head's width ({where}) "
                f"must be even, got {width}"
            )

    @property
    def rotary(self) -> float | None:
        """The base of the rotary positions in every self-attention (``positional: rotary``),
        else None."""
        return float(self.rotary_base) if self.positional == "rotary" else None


@dataclass(frozen=True)
class SequenceSpec(TransformerSpec):
    """A token transformer (``models.sequence.SequenceTransformer``) for reversal and recall.

    Attributes:
        max_len: the longest input it can take (its positional table); longer than the data's
            sequences to evaluate on longer ones.
        tie_embeddings: the output head is the token embedding table (no bias), as GPT-2's and
            Zoology's language models; needs as many outputs as input tokens.
        init: ``pytorch`` (each module's own) or ``gpt2`` (``models.sequence.gpt2_init``:
            GPT-2's and Zoology's N(0, 0.02), residual outputs scaled by 1/sqrt(2 · layers)).
        embed_dropout: dropout on the token + position embeddings; None: ``dropout`` (which
            also drops each residual branch). Zoology's models drop the embeddings only
            (``dropout: 0``, ``embed_dropout: 0.1``).
    """

    max_len: int = 1024
    tie_embeddings: bool = False
    init: str = "pytorch"
    embed_dropout: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.init not in INITS:
            raise ValueError(f"net.init must be one of {', '.join(INITS)}, got {self.init!r}")


@dataclass(frozen=True)
class PixelSpec(TransformerSpec):
    """The pixel model (``models.pixel.PixelTransformer``): learned positions by default.

    Attributes:
        output: ``categorical`` or ``logistic_mixture`` (of ``num_mixtures`` logistics).
        num_mixtures: K of the logistic mixture.
    """

    positional: str = "learned"
    output: str = "categorical"
    num_mixtures: int = 10


@dataclass(frozen=True)
class VitSpec(TransformerSpec):
    """A Vision Transformer (``models.vit.VisionTransformer``).

    Attributes:
        patch_size: side p of the patches (1: one token per pixel); must divide the image side.
    """

    d_ff: int = 128
    patch_size: int = 1


@dataclass(frozen=True)
class DetrSpec(BlockSizes):
    """DETR (``models.detr.DETR``): the block sizes of its encoder and decoder (``d_model``,
    ``num_heads``, ``d_ff``, ``dropout``) and the rest; the attention at each site is the task's.

    Attributes:
        num_queries: N object queries (the most objects an image can yield).
        num_encoder_layers: 0 is allowed (DETR's "no encoder" ablation).
        num_decoder_layers: at least 1.
        backbone: ``small_cnn`` or ``resnet18`` (random init), sized by ``backbone_width`` and
            ``backbone_stages`` (``models.backbone``).
    """

    num_queries: int = 10
    num_encoder_layers: int = 2
    num_decoder_layers: int = 2
    backbone: str = "small_cnn"
    backbone_width: int = 32
    backbone_stages: int = 3

    def __post_init__(self) -> None:
        check_sizes(self)


@dataclass(frozen=True)
class MLPSpec:
    """The LoRA study's classifier (``models.mlp.MLP``).

    Attributes:
        hidden_sizes: widths of the hidden layers, in order (784-64-64-10 by default).
    """

    hidden_sizes: tuple[int, ...] = (64, 64)

    def __post_init__(self) -> None:
        check_sizes(self)


S = TypeVar("S")


def as_spec(spec_type: type[S], value: S | Mapping[str, Any] | None) -> S:
    """``value`` as a ``spec_type``: a spec as is, a mapping (YAML, a checkpoint's dict) by its
    keys, None as the defaults.

    Raises:
        ValueError: a key the spec does not have (naming it and the allowed ones) or a bad value.
    """
    if value is None:
        return spec_type()
    if isinstance(value, spec_type):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"net must be a {spec_type.__name__} or a mapping of its sizes, got {value!r}"
        )
    allowed = [f.name for f in dataclasses.fields(spec_type)]  # type: ignore[arg-type]
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown size(s) {', '.join(map(repr, unknown))} in net ({spec_type.__name__}); "
            f"allowed: {', '.join(allowed)}"
        )
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    return spec_type(**kwargs)


def spec_dict(spec: Any) -> dict[str, Any]:
    """A spec as a plain dict of primitives (tuples as lists), as checkpoints save it."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(spec).items()}


def spec_fields(spec_type: type) -> tuple[str, ...]:
    """The size names of a spec type (the keys that live under ``net``)."""
    return tuple(f.name for f in dataclasses.fields(spec_type))


__all__ = [
    "DetrSpec",
    "MLPSpec",
    "PixelSpec",
    "SequenceSpec",
    "TransformerSpec",
    "VitSpec",
    "as_spec",
    "check_sizes",
    "spec_dict",
    "spec_fields",
]
