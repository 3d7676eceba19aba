"""The layers, each file one concept: its reference kernels (``*_forward`` above
``*_backward``, the book's math) and the module that owns its parameters.

Reading order: module, linear, elementwise (GELU, ReLU, dropout), embedding,
softmax (and cross-entropy), relative_position (a bias on the attention logits),
graph_bias (the same, chosen by the molecule's bonds), kv_cache (the keys and values kept while decoding), attention, layernorm, config
(the options a model is built from), blocks: each file imports only files before
it. ``bce`` is the loss of the property models, ``mse`` that of a regression head. The
recurrent layers the transformer replaced: ``lstm`` (a cell, and the layer that unrolls
it) and ``rnn_attention`` (attention over encoder states, Bahdanau's and Luong's). ``pointer``
is the copy mechanism of a pointer-generator decoder: a step may point at a source token."""
from minitransformer.nn import (
    attention, bce, elementwise, embedding, graph_bias, layernorm, linear, mse, relative_position, softmax,
)
from minitransformer.nn.attention import MultiHeadAttention
from minitransformer.nn.blocks import CausalBlock, DecoderBlock, EncoderBlock, FeedForward, Residual, Stack
from minitransformer.nn.config import TransformerOptions
from minitransformer.nn.elementwise import GELU, Dropout, ReLU, make_activation, set_rng
from minitransformer.nn.embedding import (
    Embedding, OutputProjection, PositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedder,
)
from minitransformer.nn.graph_bias import GraphBias
from minitransformer.nn.kv_cache import KVCache
from minitransformer.nn.layernorm import LayerNorm
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module, ModuleList, Parameter
from minitransformer.nn.pointer import PointerHead
from minitransformer.nn.relative_position import RelativePositionBias
from minitransformer.nn.softmax import CrossEntropyLoss

__all__ = [
    "CausalBlock", "CrossEntropyLoss", "DecoderBlock", "Dropout", "Embedding", "EncoderBlock", "FeedForward", "GELU", "GraphBias",
    "KVCache",
    "LayerNorm", "Linear", "Module", "ModuleList", "MultiHeadAttention", "OutputProjection",
    "Parameter", "PointerHead", "PositionalEmbedding", "ReLU", "SinusoidalPositionalEncoding", "TokenEmbedder",
    "RelativePositionBias", "Residual", "Stack", "TransformerOptions", "make_activation", "set_rng",
]
