r"""Softmax and its vector-Jacobian product.

.. math:: p_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},\quad m = \max_j x_j

Subtracting the row maximum changes nothing mathematically and keeps every
exponent :math:`\le 0`, so nothing overflows. The backward never forms the
:math:`V\times V` Jacobian :math:`\mathrm{diag}(p) - pp^\top`; its product with
``dy`` collapses to

.. math:: dx = p \odot \left(dy - \textstyle\sum_j dy_j\,p_j\right).
"""
from __future__ import annotations

from minitransformer.backend import xp


def softmax_forward(x, axis: int = -1):
    """Softmax along ``axis``. x: any shape. Returns p (same shape) and cache ``(p, axis)``."""
    z = x - x.max(axis=axis, keepdims=True)  # (...), every entry <= 0
    p = xp.exp(z, out=z)  # (...), reuses z's memory
    p /= p.sum(axis=axis, keepdims=True)
    return p, (p, axis)


def softmax_backward(dy, cache):
    """dx = p * (dy - sum(dy * p)) along the softmax axis. dy: same shape as p."""
    p, axis = cache
    inner = (dy * p).sum(axis=axis, keepdims=True)  # (..., 1, ...)
    return p * (dy - inner)


def log_softmax(x, axis: int = -1):
    """``log softmax(x)`` computed stably as ``x - m - log sum exp(x - m)``. Forward only."""
    z = x - x.max(axis=axis, keepdims=True)  # (...)
    return z - xp.log(xp.exp(z).sum(axis=axis, keepdims=True))
