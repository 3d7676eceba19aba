r"""The output projection to the vocabulary, optionally tied to a token embedding.

Untied: :math:`\text{logits} = h W + b` with its own ``weight`` (D, V).
Tied: :math:`\text{logits} = h E^\top` where :math:`E` (V, D) is the token embedding
table. The tied matrix then receives two gradient contributions (this one and the
embedding lookup's); both are added into the one ``Parameter.grad`` with ``+=``.
"""
from __future__ import annotations

from minitransformer import backend
from minitransformer.functional import linear_backward, linear_forward
from minitransformer.nn import Embedding, Linear, Module


class OutputProjection(Module):
    """h (..., D) -> logits (..., V), own weights or tied to ``tied_to.weight``."""

    def __init__(self, d_model: int, vocab_size: int, bias: bool, rng: backend.RNG,
                 tied_to: Embedding | None = None):
        self._tied = tied_to  # not a child: its Parameter belongs to the embedder
        self.linear = None if tied_to is not None else Linear(d_model, vocab_size, bias=bias, rng=rng)

    def named_children(self):
        if self.linear is not None:
            yield "linear", self.linear

    def forward(self, h):
        if self.linear is not None:
            return self.linear(h)  # (..., V)
        logits, self.cache = linear_forward(h, self._tied.weight.data.T)  # (..., V), W = E^T: a view
        return logits

    def backward(self, dlogits):
        if self.linear is not None:
            return self.linear.backward(dlogits)
        dh, dWt, _ = linear_backward(dlogits, self._require_cache())  # dWt: (D, V), the gradient of E^T
        self._tied.weight.grad += dWt.T  # (V, D): the tied matrix's second contribution
        return dh  # (..., D)
