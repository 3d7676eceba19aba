"""``Dropout`` with an explicit train/eval mode.

In training mode (the default) it draws a fresh keep-mask from ``self.rng`` on
every forward; in eval mode (``module.eval()``) it is the identity. Models share
one :class:`~minitransformer.backend.RNG` among all their dropout layers (see
:func:`set_rng`), so a run's randomness is one seed plus one counter, which a
checkpoint stores.
"""
from __future__ import annotations

from minitransformer import backend
from minitransformer.functional import dropout_backward, dropout_forward
from minitransformer.nn.module import Module


class Dropout(Module):
    """Inverted dropout with drop probability ``p``."""

    def __init__(self, p: float = 0.0, rng: backend.RNG | None = None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = float(p)
        self.rng = rng or backend.RNG(0)

    @property
    def active(self) -> bool:
        return self.training and self.p > 0.0

    def forward(self, x):
        if not self.active:
            self.cache = ("identity",)
            return x
        y, mask = dropout_forward(x, self.p, self.rng)
        self.cache = ("mask", mask)
        return y

    def backward(self, dy):
        cache = self._require_cache()
        return dy if cache[0] == "identity" else dropout_backward(dy, cache[1])


def set_rng(module: Module, rng: backend.RNG) -> None:
    """Give every sub-module that draws random numbers (attribute ``rng``) the same stream."""
    for m in module.modules():
        if hasattr(m, "rng"):
            m.rng = rng
