"""``LayerNorm`` over the last axis; weight starts at 1, bias at 0."""
from __future__ import annotations

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.functional import layernorm_backward, layernorm_forward
from minitransformer.nn.module import Module, Parameter


class LayerNorm(Module):
    """``y = weight * (x - mean) / sqrt(var + eps) + bias`` per row (biased variance)."""

    def __init__(self, d: int, eps: float = 1e-5):
        self.d, self.eps = d, eps
        self.weight = Parameter(xp.ones(d, dtype=backend.get_dtype()))  # (d,)
        self.bias = Parameter(xp.zeros(d, dtype=backend.get_dtype()))  # (d,)

    def forward(self, x):
        """x: (..., d) -> (..., d)."""
        y, self.cache = layernorm_forward(x, self.weight.data, self.bias.data, self.eps)
        return y

    def backward(self, dy):
        dx, dw, db = layernorm_backward(dy, self._require_cache())
        self.weight.grad += dw
        self.bias.grad += db
        return dx
