"""``Linear``: the stateful wrapper over :func:`~minitransformer.functional.linear_forward`.

Initialisation: weight ~ U(-1/sqrt(d_in), 1/sqrt(d_in)) (so each output starts
with variance about 1/3 of the input's), bias = 0.
"""
from __future__ import annotations

import math

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.functional import linear_backward, linear_forward
from minitransformer.nn.module import Module, Parameter


def uniform_init(shape, bound: float, rng: backend.RNG):
    """U(-bound, bound) of the given shape in the default dtype."""
    return (rng.random(shape) * 2.0 - 1.0) * bound  # (shape)


class Linear(Module):
    """``y = x @ weight + bias`` with weight (d_in, d_out) and bias (d_out,)."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True, rng: backend.RNG | None = None):
        rng = rng or backend.RNG(0)
        self.d_in, self.d_out = d_in, d_out
        self.weight = Parameter(uniform_init((d_in, d_out), 1.0 / math.sqrt(d_in), rng))  # (d_in, d_out)
        self.bias = Parameter(xp.zeros(d_out, dtype=backend.get_dtype())) if bias else None  # (d_out,)

    def forward(self, x):
        """x: (..., d_in) -> (..., d_out)."""
        y, self.cache = linear_forward(x, self.weight.data, None if self.bias is None else self.bias.data)
        return y

    def backward(self, dy):
        """dy: (..., d_out) -> dx (..., d_in); accumulates weight.grad and bias.grad."""
        dx, dW, db = linear_backward(dy, self._require_cache())
        self.weight.grad += dW
        if self.bias is not None:
            self.bias.grad += db
        return dx
