r"""Position-wise feed-forward network: the same two-layer MLP at every position.

.. math:: \mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\,W_2 + b_2,
          \qquad W_1 \in \mathbb{R}^{D\times d_{ff}},\ W_2 \in \mathbb{R}^{d_{ff}\times D}

Optional dropout acts on the hidden activation (the residual dropout after
:math:`W_2` belongs to the block).
"""
from __future__ import annotations

from minitransformer import backend
from minitransformer.nn.activations import make_activation
from minitransformer.nn.dropout import Dropout
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module


class FeedForward(Module):
    """``fc2(dropout(act(fc1(x))))``; x: (..., d_model) -> (..., d_model)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", dropout: float = 0.0,
                 bias: bool = True, rng: backend.RNG | None = None):
        rng = rng or backend.RNG(0)
        self.fc1 = Linear(d_model, d_ff, bias=bias, rng=rng)
        self.act = make_activation(activation)
        self.drop = Dropout(dropout, rng=rng)
        self.fc2 = Linear(d_ff, d_model, bias=bias, rng=rng)

    def forward(self, x):
        h = self.fc1(x)  # (..., d_ff)
        h = self.act(h)  # (..., d_ff)
        h = self.drop(h)  # (..., d_ff)
        self.cache = True
        return self.fc2(h)  # (..., d_model)

    def backward(self, dy):
        self._require_cache()
        dh = self.fc2.backward(dy)  # (..., d_ff)
        dh = self.drop.backward(dh)
        dh = self.act.backward(dh)
        return self.fc1.backward(dh)  # (..., d_model)
