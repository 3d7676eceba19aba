r"""Element-wise layers: GELU, ReLU and dropout.

Each maps every entry on its own, :math:`y_i = f(x_i)`, so each backward is one
multiply by the local derivative the forward saved: :math:`dx = dy \odot f'(x)`.

**GELU**, exact: :math:`y = x\,\Phi(x)` with :math:`\Phi` the standard normal CDF,

.. math:: \Phi(x) = \tfrac12\big(1 + \mathrm{erf}(x/\sqrt2)\big),\qquad
          \frac{dy}{dx} = \Phi(x) + x\,\varphi(x),\quad \varphi(x) = \tfrac{1}{\sqrt{2\pi}}e^{-x^2/2}.

``erf`` comes from SciPy (``cupyx.scipy.special`` on a GPU). The tanh form is
:math:`y = \tfrac12 x(1 + \tanh u)`, :math:`u = \sqrt{2/\pi}\,(x + 0.044715x^3)`, with

.. math:: \frac{dy}{dx} = \tfrac12(1 + \tanh u) + \tfrac12 x\,(1 - \tanh^2 u)\,\sqrt{2/\pi}\,(1 + 3\cdot0.044715x^2).

Both backward passes stay finite for :math:`|x|` up to 1e4 and beyond:
:math:`e^{-x^2/2}` underflows to 0 and :math:`1 - \tanh^2 u` to 0, and neither
form ever evaluates :math:`\cosh` or :math:`e^{+x}`.

**ReLU**: :math:`y = \max(x, 0)`, :math:`dy/dx = \mathbb{1}[x > 0]` (0 at 0).

**Dropout** (inverted): in training each entry is kept with probability
:math:`1-p` and scaled by :math:`1/(1-p)`, so the expected output equals the
input and evaluation needs no rescaling:

.. math:: y = x \odot m,\qquad m_i = \frac{\mathbb{1}[u_i \ge p]}{1-p},\ u_i \sim U[0,1);
          \qquad dx = dy \odot m.

A model shares one :class:`~minitransformer.backend.RNG` among all its dropout
layers (:func:`set_rng`), so a run's randomness is one seed plus one counter.
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
    """GELU. x: (...). ``approximate``: ``"none"`` (exact) or ``"tanh"``.

    Returns y (...) and the cache: the local derivative dy/dx (...), which the
    forward has at hand anyway, so the backward is one multiply."""
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
    """``max(x, 0)``. x: (...). Returns y (...) and the cache ``x > 0`` (bool, ...)."""
    positive = x > 0  # (...)
    return x * positive, positive  # (...)


def relu_backward(dy, cache):
    """dx = dy where the input was positive, 0 elsewhere. dy: (...)."""
    return dy * cache  # (...)


def make_dropout_mask(shape, p: float, rng: backend.RNG, dtype):
    """A (shape) array of 0 and 1/(1-p), drawn from ``rng``."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout: p must be in [0, 1), got {p}")
    keep = rng.random(shape, dtype=dtype) >= p  # (shape) bool
    return keep.astype(dtype) * (1.0 / (1.0 - p))  # (shape)


def dropout_forward(x, p: float, rng: backend.RNG | None = None, mask=None):
    """Inverted dropout with drop probability ``p`` in [0, 1).

    Args:
        x: (...) input.
        p: drop probability; 0 is the identity.
        rng: where to draw the mask from, or
        mask: a ready (...) keep-mask of 0 and 1/(1-p) (for tests and replays).

    Returns:
        y: (...); cache: the mask (...), or None for the identity.
    """
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
    """dx = dy * mask (the identity when the forward was). dy: (...)."""
    return dy if cache is None else dy * cache  # (...)


class GELU(Module):
    """``x * Phi(x)`` (``approximate="none"``) or its tanh approximation."""

    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def extra_repr(self):
        return "" if self.approximate == "none" else f"approximate={self.approximate!r}"

    def forward(self, x):
        check_array(x, "GELU")
        if not kernels.fast:  # the reference kernel, the math of this file
            y, self.cache = gelu_forward(x, self.approximate)
        else:  # the fast twin (minitransformer/fast/elementwise.py), proven equal in tests/fast
            y, self.cache = fast_elementwise.gelu_forward(x, self.approximate)
        return y

    def backward(self, dy):
        return gelu_backward(dy, self._require_cache())  # both sets' cache: dy/dx


class ReLU(Module):
    """``max(x, 0)``."""

    def forward(self, x):
        check_array(x, "ReLU")
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


class Dropout(Module):
    """Inverted dropout with drop probability ``p``: active in training mode only."""

    def __init__(self, p: float = 0.0, rng: backend.RNG | None = None):
        if not 0.0 <= p < 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1), got {p}")
        self.p = float(p)
        self.rng = backend.as_rng(rng)

    def extra_repr(self):
        return f"p={self.p}"

    @property
    def active(self) -> bool:
        """True when forward draws a mask: training mode and p > 0."""
        return self.training and self.p > 0.0

    def forward(self, x):
        """x: (...) -> (...); the identity in eval mode or with p = 0."""
        check_array(x, "Dropout")
        y, mask = dropout_forward(x, self.p if self.active else 0.0, self.rng)
        self.cache = (mask,)  # a tuple: the identity's mask is None, yet forward has run
        return y

    def backward(self, dy):
        (mask,) = self._require_cache()
        return dropout_backward(dy, mask)


def set_rng(module: Module, rng) -> None:
    """Give every sub-module that draws random numbers (attribute ``rng``) the same stream.
    ``rng``: a :class:`backend.RNG`, an int seed or a NumPy Generator (:func:`backend.as_rng`)."""
    rng = backend.as_rng(rng)
    for m in module.modules():
        if hasattr(m, "rng"):
            m.rng = rng
