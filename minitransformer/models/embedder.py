r"""The input side shared by every model: token embedding + positions + dropout.

.. math:: h_0 = \mathrm{dropout}\big(s\,E[\text{ids}] + P_{0..T-1}\big)

``s`` is 1 for learned positions and :math:`\sqrt{D}` for sinusoidal ones (so
token vectors, initialised with std :math:`1/\sqrt D`, are comparable with the
unit-amplitude sin/cos code, as in the original transformer).
"""
from __future__ import annotations

import math

from minitransformer import backend
from minitransformer.nn import (
    Dropout, Embedding, Module, Parameter, PositionalEmbedding, SinusoidalPositionalEncoding,
)


class TokenEmbedder(Module):
    """ids (B, T) -> (B, T, D): scaled token embedding plus position code, then dropout."""

    def __init__(self, vocab_size: int, d_model: int, max_len: int, pos: str, dropout: float,
                 rng: backend.RNG, shared_weight: Parameter | None = None):
        if pos == "sinusoidal":
            self.scale = math.sqrt(d_model)
            std = 1.0 / math.sqrt(d_model)
        else:
            self.scale, std = 1.0, 0.02
        self.tok = Embedding(vocab_size, d_model, init_std=std, rng=rng)
        if shared_weight is not None:
            # Share the table, not the module: each lookup keeps its own cache, and both
            # backward passes add into the one Parameter.grad.
            self.tok.weight = shared_weight
        if pos == "learned":
            self.pos = PositionalEmbedding(max_len, d_model, init_std=0.02, rng=rng)
        else:
            self.pos = SinusoidalPositionalEncoding(max_len, d_model)
        self.drop = Dropout(dropout, rng=rng)

    def forward(self, ids, offset: int = 0):
        """ids: (B, T) integer; offset: position of the first token (KV-cached decoding)."""
        x = self.tok(ids)  # (B, T, D)
        if self.scale != 1.0:
            x *= self.scale
        x += self.pos(ids.shape[1], offset)  # (B, T, D), broadcast over the batch
        self.cache = True
        return self.drop(x)  # (B, T, D)

    def backward(self, dout):
        """dout: (B, T, D). Accumulates the token (and learned position) gradients."""
        self._require_cache()
        dx = self.drop.backward(dout)  # (B, T, D)
        self.pos.backward(dx)
        self.tok.backward(dx * self.scale if self.scale != 1.0 else dx)
        return None
