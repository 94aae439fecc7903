"""Plain ``nn.Module``s shared by the experiments (no Lightning imports here)."""

from attn_lightning.models.decoding import categorical, generate, greedy
from attn_lightning.models.multihead import MultiHeadAttention
from attn_lightning.models.positional import (
    LearnedPositionalEncoding,
    NoPositionalEncoding,
    SinusoidalPositionalEncoding,
    build_positional_encoding,
)
from attn_lightning.models.sequence import SequenceTransformer
from attn_lightning.models.short_conv import ShortConvolution
from attn_lightning.models.transformer import (
    BlockSizes,
    DecoderBlock,
    EncoderBlock,
    FeedForward,
    TransformerEncoder,
)
from attn_lightning.models.vit import VisionTransformer

__all__ = [
    "BlockSizes",
    "DecoderBlock",
    "EncoderBlock",
    "FeedForward",
    "LearnedPositionalEncoding",
    "MultiHeadAttention",
    "NoPositionalEncoding",
    "SequenceTransformer",
    "ShortConvolution",
    "SinusoidalPositionalEncoding",
    "TransformerEncoder",
    "VisionTransformer",
    "build_positional_encoding",
    "categorical",
    "generate",
    "greedy",
]
