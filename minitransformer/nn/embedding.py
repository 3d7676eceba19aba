r"""Token and position embeddings, and the projection back to the vocabulary.

The lookup ``out = W[ids]`` has a scatter-add backward, where repeated ids sum:

.. math:: dW_i = \sum_{(b,t):\ ids_{bt} = i} dout_{bt}.

:class:`TokenEmbedder` makes a model's input, :math:`h_0 = \mathrm{dropout}(s\,E[\text{ids}] + P)`:
learned :math:`P` and :math:`s = 1`; or sinusoidal :math:`P_{t,2i} = \sin(t / 10000^{2i/D})`,
:math:`P_{t,2i+1} = \cos(t / 10000^{2i/D})` and :math:`s = \sqrt D` (token std
:math:`1/\sqrt D`: comparable with the unit code); or, for ``pos="relative"`` (a bias in
attention instead), :math:`P = 0`, :math:`s = 1`.

Tied to the embedding, :math:`\text{logits} = h E^\top`: :math:`E` gets two gradients,
both added into one ``Parameter.grad``.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from minitransformer import backend, kernels
from minitransformer.backend import check_ids, xp
from minitransformer.fast import embedding as fast_embedding
from minitransformer.fast import linear as fast_linear
from minitransformer.nn.elementwise import Dropout
from minitransformer.nn.linear import Linear, linear_backward, linear_forward
from minitransformer.nn.module import Module, Parameter, check_array


def check_token_batch(ids, vocab_size: int, max_len: int, what: str) -> None:
    """ValueError unless ``ids`` is a (B, T) array, 1 <= T <= max_len, ids in [0, vocab_size)."""
    check_array(ids, what)
    if getattr(ids, "ndim", None) != 2:
        raise ValueError(f"{what}: ids must have shape (B, T), got {tuple(getattr(ids, 'shape', ()))}")
    if ids.shape[1] == 0:
        raise ValueError(f"{what}: sequences of length 0; every sequence needs at least one token (BOS)")
    if ids.shape[1] > max_len:
        raise ValueError(f"{what}: sequence length {ids.shape[1]} exceeds max_len={max_len}; "
                         "build the model with a larger max_len or feed shorter sequences")
    check_ids(ids, vocab_size, what)


def ids_to_device(ids, vocab_size: int, what: str = "batch"):
    """Check host ids (...), then copy them to the device."""
    host = np.asarray(ids)  # (...)
    check_ids(host, vocab_size, what)
    return backend.asarray(host)


class EmbeddingCache(NamedTuple):
    """What :func:`embedding_backward` needs: where each row went, not the rows."""

    ids: object  # (...) the ids looked up
    shape: tuple  # (V, D), dW's shape
    dtype: object  # dW's dtype


def embedding_forward(ids, W):
    """ids: (...) in [0, V); W: (V, D). Returns out (..., D), cache."""
    check_ids(ids, W.shape[0])
    out = W[ids]  # (..., D)
    return out, EmbeddingCache(ids, W.shape, W.dtype)


def embedding_backward(dout, cache: EmbeddingCache):
    """dout: (..., D) -> dW (V, D)."""
    ids, shape, dtype = cache
    dW = xp.zeros(shape, dtype=dtype)  # (V, D)
    backend.scatter_add(dW, ids.reshape(-1), dout.reshape(-1, shape[1]))  # repeated ids sum
    return dW


class Embedding(Module):
    """Lookup table ``weight`` (n, d): ids (...) -> (..., d)."""

    def __init__(self, n: int, d: int, init_std: float = 0.02, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.n, self.d = n, d
        self.weight = Parameter(rng.normal((n, d), std=init_std))  # (n, d)

    def extra_repr(self):
        return f"{self.n}, {self.d}"

    def forward(self, ids):
        check_array(ids, "Embedding")
        out, self.cache = embedding_forward(ids, self.weight.data)
        return out

    def backward(self, dout):
        """Accumulates weight.grad; ids have no gradient."""
        cache = self._require_cache()
        if not kernels.fast:  # the reference kernel, the math of this file
            self.weight.grad += embedding_backward(dout, cache)
        else:
            self.weight.grad += fast_embedding.embedding_backward(dout, cache)
        return None


def _check_positions(T: int, offset: int, max_len: int, what: str):
    if offset + T > max_len:
        raise ValueError(f"{what}: positions {offset}..{offset + T - 1} exceed max_len={max_len}; "
                         "build the model with a larger max_len or feed shorter sequences")


class PositionalEmbedding(Module):
    """Learned absolute positions: ``weight`` (max_len, d)."""

    def __init__(self, max_len: int, d: int, init_std: float = 0.02, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.max_len, self.d = max_len, d
        self.weight = Parameter(rng.normal((max_len, d), std=init_std))  # (max_len, d)

    def extra_repr(self):
        return f"max_len={self.max_len}, d={self.d}"

    def forward(self, T: int, offset: int = 0):
        """Positions offset .. offset+T-1: (1, T, d)."""
        _check_positions(T, offset, self.max_len, "PositionalEmbedding")
        self.cache = (T, offset)
        return self.weight.data[None, offset:offset + T]  # (1, T, d), a view

    def backward(self, dout):
        """dout: (B, T, d) gradient of the embedding sum; sums over the batch."""
        T, offset = self._require_cache()
        self.weight.grad[offset:offset + T] += dout.sum(axis=0)  # (T, d)
        return None


class SinusoidalPositionalEncoding(Module):
    """The fixed sin/cos code."""

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

    extra_repr = PositionalEmbedding.extra_repr

    def forward(self, T: int, offset: int = 0):
        _check_positions(T, offset, self.max_len, "SinusoidalPositionalEncoding")
        self.cache = (T, offset)
        return self.table[None, offset:offset + T]  # (1, T, d)

    def backward(self, dout):
        self._require_cache()
        return None  # fixed code: nothing to learn


class TokenEmbedder(Module):
    """ids (B, T) -> :math:`h_0` (B, T, D)."""

    def __init__(self, vocab_size: int, d_model: int, max_len: int, pos: str, emb_dropout: float,
                 rng: backend.RNG, shared_weight: Parameter | None = None):
        if pos not in ("learned", "sinusoidal", "relative"):
            raise ValueError(f"TokenEmbedder: pos must be 'learned', 'sinusoidal' or 'relative', got {pos!r}")
        rng, self.kind, sinusoidal = backend.as_rng(rng), pos, pos == "sinusoidal"
        self.scale = math.sqrt(d_model) if sinusoidal else 1.0
        self.tok = Embedding(vocab_size, d_model, init_std=1.0 / self.scale if sinusoidal else 0.02, rng=rng)
        if shared_weight is not None:
            # share the table, not the module: each lookup keeps its own cache
            self.tok.weight = shared_weight
        if pos == "learned":
            self.pos = PositionalEmbedding(max_len, d_model, init_std=0.02, rng=rng)
        elif pos == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(max_len, d_model)
        else:
            self.pos = None
        self.drop = Dropout(emb_dropout, rng=rng)

    def extra_repr(self):
        return f"pos={self.kind}, scale={self.scale:g}"

    def forward(self, ids, offset: int = 0):
        """offset: the first token's position."""
        x = self.tok(ids)  # (B, T, D)
        if self.scale != 1.0:
            x *= self.scale
        if self.pos is not None:
            x += self.pos(ids.shape[1], offset)  # (B, T, D), broadcast over the batch
        self.cache = True
        return self.drop(x)  # (B, T, D)

    def backward(self, dout):
        self._require_cache()
        dx = self.drop.backward(dout)  # (B, T, D)
        if self.pos is not None:
            self.pos.backward(dx)
        self.tok.backward(dx * self.scale if self.scale != 1.0 else dx)
        return None


class OutputProjection(Module):
    """h (..., D) -> logits (..., V): own weights or ``tied_to.weight`` transposed."""

    def __init__(self, d_model: int, vocab_size: int, bias: bool, rng: backend.RNG,
                 tied_to: Embedding | None = None):
        self._tied = tied_to  # not a child: its Parameter belongs to the embedder
        self.linear = None if tied_to is not None else Linear(d_model, vocab_size, bias=bias, rng=rng)

    def named_children(self):
        if self.linear is not None:
            yield "linear", self.linear

    def extra_repr(self):
        return "" if self._tied is None else f"tied to the token embedding {tuple(self._tied.weight.shape)}"

    def forward(self, h):
        if self.linear is not None:
            return self.linear(h)  # (..., V)
        if not kernels.fast:  # the reference kernel, the math of this file
            logits, self.cache = linear_forward(h, self._tied.weight.data.T)  # (..., V), W = E^T: a view
        else:
            logits, self.cache = fast_linear.linear_forward(h, self._tied.weight.data.T)  # (..., V), W = E^T: a view
        return logits

    def backward(self, dlogits):
        if self.linear is not None:
            return self.linear.backward(dlogits)
        cache = self._require_cache()
        if isinstance(cache, fast_linear.FastLinearCache):  # the set that made the cache
            dh, dWt, _ = fast_linear.linear_backward(dlogits, cache)  # dWt: (D, V), the gradient of E^T
        else:
            dh, dWt, _ = linear_backward(dlogits, cache)  # dWt: (D, V), the gradient of E^T
        self._tied.weight.grad += dWt.T  # (V, D): the tied matrix's second contribution
        return dh  # (..., D)
