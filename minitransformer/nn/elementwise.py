r"""Element-wise layers; a backward multiplies by the derivative its forward saved.

**GELU**: :math:`y = x\,\Phi(x)`, :math:`\Phi(x) = \tfrac12(1 + \mathrm{erf}(x/\sqrt2))`,
:math:`y' = \Phi(x) + x\varphi(x)`, :math:`\varphi(x) = e^{-x^2/2}/\sqrt{2\pi}`; or
:math:`y = \tfrac12 x(1 + \tanh u)`, :math:`u = \sqrt{2/\pi}\,(x + 0.044715x^3)`,
:math:`y' = \tfrac12(1 + \tanh u) + \tfrac12 x(1 - \tanh^2 u)\,u'`,
:math:`u' = \sqrt{2/\pi}\,(1 + 3 \cdot 0.044715x^2)`. Both stay finite:
far out, :math:`e^{-x^2/2}` and :math:`1 - \tanh^2 u` round to 0.

**ReLU**: :math:`y = \max(x, 0)`, :math:`y' = \mathbb{1}[x > 0]`.

**Dropout** (inverted): :math:`y = x \odot m`, :math:`m_i = \mathbb{1}[u_i \ge p]/(1-p)`,
:math:`u_i \sim U[0,1)`, :math:`dx = dy \odot m`: the expected output is the input,
so evaluation is the identity.
"""
from __future__ import annotations

import math

from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast import elementwise as fast_elementwise
from minitransformer.nn.module import Module, check_array

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gelu_forward(x, approximate: str = "none"):
    """Returns y and the cache dy/dx, both (...)."""
    if approximate == "none":
        cdf = 0.5 * (1.0 + backend.erf(x * _SQRT_HALF))  # (...) Phi(x)
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * x * x)  # (...) phi(x), underflows to 0 far out
        return x * cdf, cdf + x * pdf  # (...), (...)
    if approximate == "tanh":
        th = xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x ** 3))  # (...) tanh u
        du_dx = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)  # (...)
        return 0.5 * x * (1.0 + th), 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du_dx  # (...), (...)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu_backward(dy, cache):
    """dx = dy * dy/dx. dy: (...), the shape of the input."""
    return dy * cache  # (...)


def relu_forward(x):
    """Caches ``x > 0``."""
    positive = x > 0  # (...)
    return x * positive, positive  # (...)


def relu_backward(dy, cache):
    return dy * cache  # (...)


def make_dropout_mask(shape, p: float, rng: backend.RNG, dtype):
    """A (shape) array of 0 and 1/(1-p)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    keep = rng.random(shape, dtype=dtype) >= p  # (shape) bool
    return keep.astype(dtype) * (1.0 / (1.0 - p))  # (shape)


def dropout_forward(x, p: float, rng: backend.RNG | None = None, mask=None):
    """Caches the mask (...), drawn from ``rng`` or given; None for p = 0."""
    if mask is None:
        if p == 0.0:
            return x, None
        if rng is None:
            raise ValueError("dropout: pass rng (a backend.RNG) or a ready mask")
        mask = make_dropout_mask(x.shape, p, rng, x.dtype)  # (...)
    elif mask.shape != x.shape:
        raise ValueError(f"dropout: mask shape {tuple(mask.shape)} != input shape {tuple(x.shape)}")
    return x * mask, mask  # (...)


def dropout_backward(dy, cache):
    return dy if cache is None else dy * cache  # (...)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def extra_repr(self):
        return "" if self.approximate == "none" else f"approximate={self.approximate!r}"

    def forward(self, x):
        check_array(x, "GELU")
        if not kernels.fast:
            y, self.cache = gelu_forward(x, self.approximate)
        else:
            y, self.cache = fast_elementwise.gelu_forward(x, self.approximate)
        return y

    def backward(self, dy):
        return gelu_backward(dy, self._require_cache())  # both sets' cache: dy/dx


class ReLU(Module):
    def forward(self, x):
        check_array(x, "ReLU")
        y, self.cache = relu_forward(x)
        return y

    def backward(self, dy):
        return relu_backward(dy, self._require_cache())


def make_activation(name: str) -> Module:
    """A fresh activation module by name."""
    if name == "gelu":
        return GELU("none")
    if name == "gelu_tanh":
        return GELU("tanh")
    if name == "relu":
        return ReLU()
    raise ValueError(f"unknown activation {name!r}; expected 'gelu', 'gelu_tanh' or 'relu'")


class Dropout(Module):
    def __init__(self, p: float = 0.0, rng: backend.RNG | None = None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = float(p)
        self.rng = backend.as_rng(rng)

    def extra_repr(self):
        return f"p={self.p}"

    @property
    def active(self) -> bool:
        return self.training and self.p > 0.0

    def forward(self, x):
        check_array(x, "Dropout")
        y, mask = dropout_forward(x, self.p if self.active else 0.0, self.rng)
        self.cache = (mask,)  # (None,) for the identity: forward has run
        return y

    def backward(self, dy):
        (mask,) = self._require_cache()
        return dropout_backward(dy, mask)


def set_rng(module: Module, rng) -> None:
    """Give every sub-module with an ``rng`` one stream: a run's randomness is a seed and a counter."""
    rng = backend.as_rng(rng)
    for m in module.modules():
        if hasattr(m, "rng"):
            m.rng = rng
