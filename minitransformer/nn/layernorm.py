r"""Layer normalisation over the last axis: for a row :math:`x \in \mathbb{R}^D`, with
bars for means over the row,

.. math::
    \mu = \overline{x},\quad
    \sigma^2 = \overline{(x-\mu)^2} \ \text{(biased)},\quad
    r = 1/\sqrt{\sigma^2+\epsilon},\quad
    \hat x = (x-\mu)\,r,\quad
    y = w \odot \hat x + b .

Backward, with :math:`g = w \odot dy`:

.. math::
    dx = r\left(g - \overline{g} - \hat x\,\overline{g \odot \hat x}\right),\quad
    dw = \textstyle\sum_{\text{rows}} dy \odot \hat x,\quad
    db = \textstyle\sum_{\text{rows}} dy

(derived in ``docs/kernels/layernorm.md``).
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast import layernorm as fast_layernorm
from minitransformer.nn.module import Module, Parameter, check_array


class LayerNormCache(NamedTuple):
    """What :func:`layernorm_backward` needs."""

    xhat: object  # (..., D) the normalised input
    rstd: object  # (..., 1) 1 / sqrt(var + eps)
    w: object  # (D,) the gain


def layernorm_forward(x, w, b, eps: float = 1e-5):
    """x (..., D), w (D,), b (D,) -> y (..., D), cache; ``eps`` goes inside the root."""
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"layernorm: input has last dimension {x.shape[-1]}, expected {w.shape[0]}")
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # (..., 1) biased: divided by D
    rstd = 1.0 / xp.sqrt(var + eps)  # (..., 1)
    xhat = (x - mu) * rstd  # (..., D)
    y = xhat * w + b  # (..., D)
    return y, LayerNormCache(xhat, rstd, w)


def layernorm_backward(dy, cache: LayerNormCache):
    """dy (..., D) -> dx (..., D), dw (D,), db (D,)."""
    xhat, rstd, w = cache
    D = xhat.shape[-1]
    dw = (dy * xhat).reshape(-1, D).sum(axis=0)  # (D,) summed over every row
    db = dy.reshape(-1, D).sum(axis=0)  # (D,)
    g = dy * w  # (..., D) the gradient of xhat, in the forward pass y = xhat * w + b
    g_mean = g.mean(axis=-1, keepdims=True)  # (..., 1)
    gx_mean = (g * xhat).mean(axis=-1, keepdims=True)  # (..., 1)
    dx = rstd * (g - g_mean - xhat * gx_mean)  # (..., D)
    return dx, dw, db


class LayerNorm(Module):
    """The layer, with a learned gain and bias."""

    def __init__(self, d: int, eps: float = 1e-5):
        self.d, self.eps = d, eps
        self.weight = Parameter(xp.ones(d, dtype=backend.get_dtype()))  # (d,)
        self.bias = Parameter(xp.zeros(d, dtype=backend.get_dtype()))  # (d,)

    def extra_repr(self):
        return f"{self.d}, eps={self.eps}"

    def forward(self, x):
        """x: (..., d) -> (..., d)."""
        check_array(x, "LayerNorm")
        w, b = self.weight.data, self.bias.data
        if not kernels.fast:  # the reference kernel, the math of this file
            y, self.cache = layernorm_forward(x, w, b, self.eps)
        else:  # the fast twin (minitransformer/fast/layernorm.py)
            y, self.cache = fast_layernorm.layernorm_forward(x, w, b, self.eps)
        return y

    def backward(self, dy):
        """dy: (..., d) -> dx (..., d); adds into the grads."""
        cache = self._require_cache()
        if isinstance(cache, fast_layernorm.FastLayerNormCache):  # the set that made the cache
            dx, dw, db = fast_layernorm.layernorm_backward(dy, cache)
        else:
            dx, dw, db = layernorm_backward(dy, cache)
        self.weight.grad += dw
        self.bias.grad += db
        return dx
