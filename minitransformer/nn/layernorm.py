r"""Layer normalisation over the last axis.

Forward, for one row :math:`x \in \mathbb{R}^D`:

.. math::
    \mu = \tfrac1D \textstyle\sum_i x_i, \quad
    \sigma^2 = \tfrac1D \textstyle\sum_i (x_i-\mu)^2 \ \text{(biased)}, \quad
    \hat x = \frac{x-\mu}{\sqrt{\sigma^2+\epsilon}}, \quad
    y = w \odot \hat x + b .

Backward: with :math:`g = w \odot dy` and :math:`r = 1/\sqrt{\sigma^2+\epsilon}`,

.. math::
    dx = r\left(g - \overline{g} - \hat x\,\overline{g \odot \hat x}\right),\quad
    dw = \textstyle\sum_{\text{rows}} dy \odot \hat x,\quad
    db = \textstyle\sum_{\text{rows}} dy,

where the bar is the mean over the D features of the row (the derivation is in
``docs/kernels/layernorm.md``). :class:`LayerNorm` holds ``w`` (starts at 1) and
``b`` (starts at 0).
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast import layernorm as fast_layernorm
from minitransformer.nn.module import Module, Parameter, check_array


class LayerNormCache(NamedTuple):
    """What :func:`layernorm_backward` needs; together these give every backward term."""

    xhat: object  # (..., D) the normalised input
    rstd: object  # (..., 1) 1 / sqrt(var + eps) of each row
    w: object  # (D,) the gain


def layernorm_forward(x, w, b, eps: float = 1e-5):
    """Normalise each row of ``x`` to zero mean and unit (biased) variance, then scale and shift.

    Args:
        x: (..., D) input.
        w: (D,) gain.
        b: (D,) bias.
        eps: added to the variance *inside* the square root.

    Returns:
        y: (..., D); cache: :class:`LayerNormCache`.
    """
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"layernorm: input has last dimension {x.shape[-1]}, expected {w.shape[0]}")
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # (..., 1) biased: divided by D
    rstd = 1.0 / xp.sqrt(var + eps)  # (..., 1)
    xhat = (x - mu) * rstd  # (..., D)
    y = xhat * w + b  # (..., D)
    return y, LayerNormCache(xhat, rstd, w)


def layernorm_backward(dy, cache: LayerNormCache):
    """Gradients of layer normalisation.

    Args:
        dy: (..., D) upstream gradient.
        cache: from :func:`layernorm_forward`.

    Returns:
        dx: (..., D); dw: (D,); db: (D,).
    """
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
    """``y = weight * (x - mean) / sqrt(var + eps) + bias`` per row (biased variance)."""

    def __init__(self, d: int, eps: float = 1e-5):
        self.d, self.eps = d, eps
        self.weight = Parameter(xp.ones(d, dtype=backend.get_dtype()))  # (d,)
        self.bias = Parameter(xp.zeros(d, dtype=backend.get_dtype()))  # (d,)

    def extra_repr(self):
        return f"{self.d}, eps={self.eps}"

    def forward(self, x):
        """x: (..., d) -> (..., d)."""
        check_array(x, "LayerNorm")
        if not kernels.fast:  # the reference kernel, the math of this file
            y, self.cache = layernorm_forward(x, self.weight.data, self.bias.data, self.eps)
        else:  # the fast twin (minitransformer/fast/layernorm.py), proven equal in tests/fast
            y, self.cache = fast_layernorm.layernorm_forward(x, self.weight.data, self.bias.data, self.eps)
        return y

    def backward(self, dy):
        """dy: (..., d) -> dx (..., d); adds into weight.grad and bias.grad."""
        cache = self._require_cache()
        if isinstance(cache, fast_layernorm.FastLayerNormCache):  # the set that made the cache
            dx, dw, db = fast_layernorm.layernorm_backward(dy, cache)
        else:
            dx, dw, db = layernorm_backward(dy, cache)
        self.weight.grad += dw
        self.bias.grad += db
        return dx
