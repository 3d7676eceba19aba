r"""Element-wise activations: GELU (exact and tanh forms) and ReLU.

Exact GELU is :math:`x\,\Phi(x)` with :math:`\Phi` the standard normal CDF,

.. math:: \Phi(x) = \tfrac12\,\mathrm{erfc}\!\left(-x/\sqrt2\right),\qquad
          \frac{d}{dx}\,x\Phi(x) = \Phi(x) + x\,\varphi(x),\quad
          \varphi(x) = e^{-x^2/2}/\sqrt{2\pi}.

NumPy has no ``erf``, and SciPy is not a dependency, so :func:`erfc` below is a
Chebyshev-fitted approximation with relative error below 1.2e-7 for every real
input (W. H. Press et al., *Numerical Recipes*, the ``erfcc`` fit). Evaluated
through ``erfc(|z|)`` it loses no accuracy in the tails: :math:`\Phi` is correct
to about 6e-8 absolute everywhere, so GELU meets 1e-6 in float64.

The tanh form is :math:`\tfrac12 x\,(1+\tanh u)` with
:math:`u=\sqrt{2/\pi}\,(x+0.044715x^3)`.

Both backward passes are finite for :math:`|x|` up to 1e4 (and beyond): they use
:math:`e^{-x^2/2}` (which underflows harmlessly to 0) and :math:`1-\tanh^2 u`,
never :math:`\cosh` or :math:`e^{+x}`.
"""
from __future__ import annotations

import math

from minitransformer.backend import xp

_SQRT_HALF = math.sqrt(0.5)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# Coefficients of the erfc fit, highest power last (Horner order below).
_ERFC_COEF = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
              0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)


def erfc(z):
    """Complementary error function of ``|z|``-safe inputs, element-wise.

    Valid for any real ``z``; relative error below 1.2e-7. ``z``: any shape.
    """
    a = xp.abs(z)  # (...)
    t = 1.0 / (1.0 + 0.5 * a)  # (...)
    poly = xp.full_like(a, _ERFC_COEF[-1])  # (...)
    for c in reversed(_ERFC_COEF[:-1]):  # Horner over 10 scalars, not over data
        poly *= t
        poly += c
    r = t * xp.exp(-a * a + poly)  # (...), erfc(|z|)
    return xp.where(z >= 0, r, 2.0 - r)  # erfc(-a) = 2 - erfc(a)


def normal_cdf(x):
    """Standard normal CDF :math:`\\Phi(x)`, element-wise, accurate in both tails."""
    return 0.5 * erfc(-x * _SQRT_HALF)


def gelu_forward(x, approximate: str = "none"):
    """GELU activation.

    Args:
        x: (...) input.
        approximate: ``"none"`` for the exact :math:`x\\Phi(x)`, ``"tanh"`` for the
            tanh approximation.

    Returns:
        y: (...) output.
        cache: ``("none", x, cdf)`` or ``("tanh", x, tanh_u)``; what the derivative needs.
    """
    if approximate == "none":
        cdf = normal_cdf(x)  # (...)
        return x * cdf, ("none", x, cdf)
    if approximate == "tanh":
        th = xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))  # (...)
        return 0.5 * x * (1.0 + th), ("tanh", x, th)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu_backward(dy, cache):
    """Gradient of GELU. ``dy``: (...), same shape as the input. Returns dx (...)."""
    kind, x, aux = cache
    if kind == "none":
        # d/dx [x Phi(x)] = Phi(x) + x phi(x); in the forward pass aux was Phi(x)
        pdf = xp.exp(-0.5 * x * x) * _INV_SQRT_2PI  # (...), underflows to 0 for |x| > 39
        return dy * (aux + x * pdf)
    # tanh form: y = x/2 (1 + th), th = tanh(u), u = c (x + a x^3)
    du_dx = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)  # (...)
    grad = 0.5 * (1.0 + aux) + 0.5 * x * (1.0 - aux * aux) * du_dx  # (...)
    return dy * grad


def relu_forward(x):
    """``max(x, 0)``. x: (...). Returns y (...) and the cache ``x > 0`` (bool, ...)."""
    positive = x > 0  # (...)
    return x * positive, positive


def relu_backward(dy, cache):
    """Gradient of ReLU: pass ``dy`` where the input was positive (the derivative at 0 is taken as 0)."""
    return dy * cache
