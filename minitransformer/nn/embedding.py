r"""Token and position embeddings.

* :class:`Embedding` (V, D): a learned row per token, initialised N(0, init_std^2).
* :class:`PositionalEmbedding` (max_len, D): a learned row per position.
* :class:`SinusoidalPositionalEncoding` (max_len, D): the fixed code of the original
  transformer, no parameters:

.. math:: PE_{t,2i} = \sin\!\big(t / 10000^{2i/D}\big),\qquad
          PE_{t,2i+1} = \cos\!\big(t / 10000^{2i/D}\big).

Both position modules take the token ids' shape (B, T) and a start offset (for
KV-cached decoding, where the new token sits at position ``offset``) and return
a (1, T, D) array to add to the token embeddings.
"""
from __future__ import annotations

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.functional import embedding_backward, embedding_forward
from minitransformer.nn.module import Module, Parameter


class Embedding(Module):
    """Lookup table ``weight`` (n, d); ``forward(ids (B, T)) -> (B, T, d)``."""

    def __init__(self, n: int, d: int, init_std: float = 0.02, rng: backend.RNG | None = None):
        rng = rng or backend.RNG(0)
        self.n, self.d = n, d
        self.weight = Parameter(rng.normal((n, d), std=init_std))  # (n, d)

    def forward(self, ids):
        out, self.cache = embedding_forward(ids, self.weight.data)
        return out

    def backward(self, dout):
        """Accumulates weight.grad; returns None (integer ids have no gradient)."""
        self.weight.grad += embedding_backward(dout, self._require_cache())
        return None


def _check_positions(T: int, offset: int, max_len: int, what: str):
    if offset + T > max_len:
        raise ValueError(
            f"{what}: positions {offset}..{offset + T - 1} exceed max_len={max_len}; "
            "build the model with a larger max_len or feed shorter sequences"
        )


class PositionalEmbedding(Module):
    """Learned absolute positions: ``weight`` (max_len, d)."""

    def __init__(self, max_len: int, d: int, init_std: float = 0.02, rng: backend.RNG | None = None):
        rng = rng or backend.RNG(0)
        self.max_len, self.d = max_len, d
        self.weight = Parameter(rng.normal((max_len, d), std=init_std))  # (max_len, d)

    def forward(self, T: int, offset: int = 0):
        """The codes of positions offset .. offset+T-1, shape (1, T, d)."""
        _check_positions(T, offset, self.max_len, "PositionalEmbedding")
        self.cache = (T, offset)
        return self.weight.data[None, offset:offset + T]  # (1, T, d), a view

    def backward(self, dout):
        """dout: (B, T, d) gradient of the embedding sum; sums over the batch."""
        T, offset = self._require_cache()
        self.weight.grad[offset:offset + T] += dout.sum(axis=0)  # (T, d)
        return None


class SinusoidalPositionalEncoding(Module):
    """Fixed sin/cos positions (base 10000, pair index 2i/D). No parameters."""

    def __init__(self, max_len: int, d: int):
        self.max_len, self.d = max_len, d
        self.table = self._table(backend.get_dtype())  # (max_len, d)

    def _table(self, dtype):
        pos = xp.arange(self.max_len, dtype=xp.float64)[:, None]  # (max_len, 1)
        two_i = xp.arange(0, self.d, 2, dtype=xp.float64)  # (ceil(d/2),)
        angle = pos / (10000.0 ** (two_i / self.d))  # (max_len, ceil(d/2))
        table = xp.zeros((self.max_len, self.d), dtype=xp.float64)  # (max_len, d)
        table[:, 0::2] = xp.sin(angle)
        table[:, 1::2] = xp.cos(angle[:, : self.d // 2])
        return table.astype(dtype)

    def on_astype(self, dtype):
        self.table = self._table(dtype)

    def forward(self, T: int, offset: int = 0):
        _check_positions(T, offset, self.max_len, "SinusoidalPositionalEncoding")
        self.cache = (T, offset)
        return self.table[None, offset:offset + T]  # (1, T, d)

    def backward(self, dout):
        self._require_cache()
        return None  # fixed code: nothing to learn

