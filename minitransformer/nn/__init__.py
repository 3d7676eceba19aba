"""Stateful layers: thin wrappers over :mod:`minitransformer.functional` that own
parameters, caches and train/eval mode."""
from minitransformer.nn.activations import GELU, ReLU, make_activation
from minitransformer.nn.attention import KVCache, MultiHeadAttention
from minitransformer.nn.blocks import DecoderBlock, EncoderBlock
from minitransformer.nn.dropout import Dropout, set_rng
from minitransformer.nn.embedding import Embedding, PositionalEmbedding, SinusoidalPositionalEncoding
from minitransformer.nn.feedforward import FeedForward
from minitransformer.nn.layernorm import LayerNorm
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module, ModuleList, Parameter

__all__ = [
    "DecoderBlock", "Dropout", "Embedding", "EncoderBlock", "FeedForward", "GELU", "KVCache",
    "LayerNorm", "Linear", "Module", "ModuleList", "MultiHeadAttention", "Parameter",
    "PositionalEmbedding", "ReLU", "SinusoidalPositionalEncoding", "make_activation", "set_rng",
]
