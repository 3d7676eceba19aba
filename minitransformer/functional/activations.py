r"""Element-wise activations: GELU (exact and tanh forms) and ReLU.

Exact GELU is :math:`x\,\Phi(x)` with :math:`\Phi` the standard normal CDF,

.. math:: \Phi(x) = \tfrac12\,\mathrm{erfc}\!\left(-x/\sqrt2\right),\qquad
          \frac{d}{dx}\,x\Phi(x) = \Phi(x) + x\,\Phi'(x).

NumPy has no ``erf``, and SciPy is not a dependency, so :func:`erfc` below is a
Chebyshev-fitted approximation with relative error below 1.2e-7 for every real
input (W. H. Press et al., *Numerical Recipes*, the ``erfcc`` fit). Evaluated
through ``erfc(|z|)`` it loses no accuracy in the tails: :math:`\Phi` is correct
to about 6e-8 absolute everywhere, so GELU meets 1e-6 in float64.

The backward differentiates the *fitted* :math:`\Phi` (not the true density
:math:`e^{-x^2/2}/\sqrt{2\pi}`), so forward and backward describe one and the
same function and finite-difference checks of whole models pass at the
default tolerance (1e-5 relative). The
fit is rescaled so that :math:`\Phi(0) = 1/2` exactly, which makes it continuous.

The tanh form is :math:`\tfrac12 x\,(1+\tanh u)` with
:math:`u=\sqrt{2/\pi}\,(x+0.044715x^3)`.

Both backward passes are finite for :math:`|x|` up to 1e4 (and beyond): they use
:math:`e^{-x^2/2}` (which underflows harmlessly to 0) and :math:`1-\tanh^2 u`,
never :math:`\cosh` or :math:`e^{+x}`. Each forward returns the local derivative
:math:`dy/dx` as its cache, so the backward is one multiply.
"""
from __future__ import annotations

import math

from minitransformer.backend import xp

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
# Coefficients c_0 .. c_9 of the erfc fit (Horner order below).
_ERFC_COEF = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806,
              0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)
_ERFC_DCOEF = tuple(k * c for k, c in enumerate(_ERFC_COEF))[1:]  # coefficients of P'(t)
_ERFC_AT_0 = 0.0  # log of the raw fit at a = 0 (t = 1), summed in Horner order like the arrays
for _c in reversed(_ERFC_COEF):
    _ERFC_AT_0 = _ERFC_AT_0 * 1.0 + _c  # so subtracting it makes erfc(0) = 1 exactly


def _horner(coef, t):
    """sum_k coef[k] t^k, element-wise (a loop over ~10 scalars, not over data)."""
    out = xp.full_like(t, coef[-1])  # (...)
    for c in reversed(coef[:-1]):
        out *= t
        out += c
    return out


def _erfc_nonneg(a, derivative: bool = False):
    r"""The fitted :math:`\mathrm{erfc}(a)` for :math:`a \ge 0`, and optionally its derivative.

    :math:`\tilde r(a) = t\,e^{-a^2 + P(t) - P(1)}` with :math:`t = 1/(1 + a/2)`
    (dividing by the raw fit's value at 0 makes :math:`\tilde r(0) = 1` exactly, so
    :math:`\Phi` is continuous at 0). Differentiating the *fit*, not the true
    function, keeps forward and backward one consistent function:

    .. math:: \tilde r'(a) = \tilde r(a)\left(-\tfrac t2 - 2a - \tfrac{t^2}{2} P'(t)\right).
    """
    t = 1.0 / (1.0 + 0.5 * a)  # (...)
    r = t * xp.exp(-a * a + _horner(_ERFC_COEF, t) - _ERFC_AT_0)  # (...), underflows to 0 far out
    if not derivative:
        return r, None
    dr = r * (-0.5 * t - 2.0 * a - 0.5 * t * t * _horner(_ERFC_DCOEF, t))  # (...)
    return r, dr


def erfc(z):
    """Complementary error function, element-wise, for any real ``z`` (any shape).

    Relative error below about 1.2e-7 everywhere, including both tails.
    """
    r, _ = _erfc_nonneg(xp.abs(z))  # (...), erfc(|z|)
    return xp.where(z >= 0, r, 2.0 - r)  # erfc(-a) = 2 - erfc(a)


def _normal_cdf_and_pdf(x, derivative: bool):
    """Phi(x) through the erfc fit, and (optionally) its exact derivative d Phi / dx."""
    a = xp.abs(x) * _SQRT_HALF  # (...)
    r, dr = _erfc_nonneg(a, derivative)  # (...), erfc(|x| / sqrt 2)
    half_r = 0.5 * r
    cdf = xp.where(x >= 0, 1.0 - half_r, half_r)  # (...)
    pdf = None if dr is None else (-0.5 * _SQRT_HALF) * dr  # (...), Phi' is even in x
    return cdf, pdf


def normal_cdf(x):
    """Standard normal CDF :math:`\\Phi(x)`, element-wise, accurate in both tails."""
    return _normal_cdf_and_pdf(x, derivative=False)[0]


# Element-wise work of about 50 array passes (exact GELU) runs several times faster
# when done in blocks that stay in the CPU cache than over a large array at once.
_BLOCK = 1 << 14


def _blocked(fn, x):
    """``fn(x) -> (y, dydx)`` for an element-wise ``fn``, evaluated in cache-sized blocks
    on the CPU (a GPU gets the whole array: one launch per operation is cheaper there)."""
    from minitransformer import backend  # late: the active backend may change
    if x.size <= 2 * _BLOCK or backend.name() == "cupy":
        return fn(x)
    flat = x.reshape(-1)  # (N,)
    y, dydx = xp.empty_like(flat), xp.empty_like(flat)  # (N,), (N,)
    for i in range(0, flat.size, _BLOCK):  # a loop over memory blocks, not over batch/time
        y[i:i + _BLOCK], dydx[i:i + _BLOCK] = fn(flat[i:i + _BLOCK])
    return y.reshape(x.shape), dydx.reshape(x.shape)


def _gelu_exact(x):
    cdf, pdf = _normal_cdf_and_pdf(x, derivative=True)  # (...), (...)
    return x * cdf, cdf + x * pdf  # y, and d/dx [x Phi(x)] = Phi(x) + x Phi'(x)


def _gelu_tanh(x):
    # y = x/2 (1 + th), th = tanh(u), u = c (x + 0.044715 x^3)
    th = xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))  # (...)
    du_dx = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)  # (...)
    local = 0.5 * (1.0 + th) + 0.5 * x * (1.0 - th * th) * du_dx  # (...), 1 - th^2 never overflows
    return 0.5 * x * (1.0 + th), local


def gelu_forward(x, approximate: str = "none"):
    """GELU activation.

    Args:
        x: (...) input.
        approximate: ``"none"`` for the exact :math:`x\\Phi(x)`, ``"tanh"`` for the
            tanh approximation.

    Returns:
        y: (...) output.
        cache: the local derivative dy/dx (...), computed here from values the
        forward has at hand anyway, so the backward is a single multiply.
    """
    if approximate == "none":
        return _blocked(_gelu_exact, x)
    if approximate == "tanh":
        return _blocked(_gelu_tanh, x)
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def gelu_backward(dy, cache):
    """Gradient of GELU: ``dy * dy/dx``. ``dy``: (...), same shape as the input. Returns dx (...)."""
    return dy * cache


def relu_forward(x):
    """``max(x, 0)``. x: (...). Returns y (...) and the cache ``x > 0`` (bool, ...)."""
    positive = x > 0  # (...)
    return x * positive, positive


def relu_backward(dy, cache):
    """Gradient of ReLU: pass ``dy`` where the input was positive (the derivative at 0 is taken as 0)."""
    return dy * cache
