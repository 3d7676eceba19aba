"""Activation modules: ``GELU`` (exact or tanh) and ``ReLU``. No parameters."""
from __future__ import annotations

from minitransformer.functional import gelu_backward, gelu_forward, relu_backward, relu_forward
from minitransformer.nn.module import Module


class GELU(Module):
    """``x * Phi(x)`` (``approximate="none"``) or its tanh approximation."""

    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x):
        y, self.cache = gelu_forward(x, self.approximate)
        return y

    def backward(self, dy):
        return gelu_backward(dy, self._require_cache())


class ReLU(Module):
    """``max(x, 0)``."""

    def forward(self, x):
        y, self.cache = relu_forward(x)
        return y

    def backward(self, dy):
        return relu_backward(dy, self._require_cache())


def make_activation(name: str) -> Module:
    """``"gelu"``, ``"gelu_tanh"`` or ``"relu"`` -> a fresh activation module."""
    if name == "gelu":
        return GELU("none")
    if name == "gelu_tanh":
        return GELU("tanh")
    if name == "relu":
        return ReLU()
    raise ValueError(f"unknown activation {name!r}; expected 'gelu', 'gelu_tanh' or 'relu'")
