"""The layers, each file one concept: its reference kernels (``*_forward`` above
``*_backward``, the book's math) and the module that owns its parameters.

Reading order: module, linear, elementwise (GELU, ReLU, dropout), embedding,
softmax (and cross-entropy), relative_position (a bias on the attention logits),
attention, layernorm, blocks: each file imports only files before it. ``bce`` is
the loss of the property models."""
from minitransformer import kernels
from minitransformer.nn import (
    attention, bce, elementwise, embedding, layernorm, linear, relative_position, softmax,
)
from minitransformer.nn.attention import KVCache, MultiHeadAttention
from minitransformer.nn.blocks import DecoderBlock, EncoderBlock, FeedForward
from minitransformer.nn.elementwise import GELU, Dropout, ReLU, make_activation, set_rng
from minitransformer.nn.embedding import (
    Embedding, OutputProjection, PositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedder,
)
from minitransformer.nn.layernorm import LayerNorm
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module, ModuleList, Parameter
from minitransformer.nn.relative_position import RelativePositionBias

__all__ = [
    "DecoderBlock", "Dropout", "Embedding", "EncoderBlock", "FeedForward", "GELU", "KVCache",
    "LayerNorm", "Linear", "Module", "ModuleList", "MultiHeadAttention", "OutputProjection",
    "Parameter", "PositionalEmbedding", "ReLU", "SinusoidalPositionalEncoding", "TokenEmbedder",
    "RelativePositionBias", "make_activation", "set_rng", "REFERENCE_KERNELS",
]

# The reference kernel set (see minitransformer/kernels.py): every kernel these files define.
REFERENCE_KERNELS = {
    name: getattr(module, name) for module in (linear, embedding, softmax, attention, relative_position, layernorm, elementwise, bce)
    for name in kernels.NAMES if hasattr(module, name)
}
