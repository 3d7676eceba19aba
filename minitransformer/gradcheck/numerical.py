r"""Finite differences: the numerical side of every gradient check.

This module holds the numbers the analytic gradients are compared against:
:func:`numerical_grad` (one element at a time) and :func:`numerical_directional`
(all elements at once, along one direction), plus the small array helpers they
share with :mod:`minitransformer.gradcheck.engine`.

Central differences
-------------------
For a scalar function :math:`L` of an array :math:`x`, a step :math:`\varepsilon`
and the unit array :math:`e_i` (1 at position :math:`i`, 0 elsewhere),

.. math::
    \frac{\partial L}{\partial x_i} \approx
    \frac{L(x + \varepsilon e_i) - L(x - \varepsilon e_i)}{2\varepsilon}.

Expanding both evaluations in a Taylor series,
:math:`L(x \pm \varepsilon e_i) = L \pm \varepsilon L' + \tfrac{\varepsilon^2}{2} L''
\pm \tfrac{\varepsilon^3}{6} L''' + O(\varepsilon^4)`, the even terms cancel and

.. math::
    \frac{L(x + \varepsilon e_i) - L(x - \varepsilon e_i)}{2\varepsilon}
    = L' + \frac{\varepsilon^2}{6} L''' + O(\varepsilon^4),

so the *truncation* error is :math:`O(\varepsilon^2)` (a one-sided difference
only reaches :math:`O(\varepsilon)`). Against it stands the *rounding* error:
each evaluation of :math:`L` is off by about :math:`u|L|` (unit roundoff
:math:`u = 2^{-53} \approx 1.1\times10^{-16}` in float64), and dividing by
:math:`2\varepsilon` magnifies that to about :math:`u|L|/\varepsilon`. With the
default :math:`\varepsilon = 10^{-6}` the total is roughly
:math:`10^{-12}|L'''| + 10^{-10}|L|`. In float32 (:math:`u \approx 6\times10^{-8}`)
the rounding term alone would be about :math:`0.06\,|L|`, which is why every
check here insists on float64 arrays (build them under
``backend.dtype_scope("float64")``). The step is taken as the difference of
the two *stored* perturbed values, :math:`(x_i+\varepsilon) - (x_i-\varepsilon)`,
which is exactly representable, rather than the nominal :math:`2\varepsilon`.

Scalarising an array output
---------------------------
Kernels and layers return arrays, but a derivative check needs a scalar. We use

.. math:: L = \sum_j \mathrm{out}_j\, R_j

for a fixed random array :math:`R` (random signs, magnitudes in [0.5, 1.5), so
every output element carries real weight and errors in different elements
cannot cancel systematically). Since :math:`\partial L/\partial\,\mathrm{out} = R`,
calling the analytic backward with ``dout = R`` yields exactly :math:`\nabla L`.
The numerical side evaluates :math:`\sum_j (\mathrm{out}_j(x+\varepsilon e_i) -
\mathrm{out}_j(x-\varepsilon e_i))\,R_j`: the same number mathematically, but outputs
that do not depend on :math:`x_i` cancel exactly before the weighted sum, so
the rounding noise is that of the affected outputs only, not of all of :math:`L`.

Directional derivatives
-----------------------
Element-wise checking costs two forward passes per element. For large layers
:func:`check_module` (and :func:`check_kernel`) can instead compare, for a few
random unit arrays :math:`u` (:math:`\|u\|_2 = 1`), the directional derivative

.. math::
    D_u L = \langle \nabla L, u\rangle
    \approx \frac{L(\theta + \varepsilon u) - L(\theta - \varepsilon u)}{2\varepsilon},

two forward passes per direction. A wrong gradient :math:`g \ne \nabla L` goes
unnoticed only if :math:`u \perp (g - \nabla L)`, which a random direction hits
with probability zero; but an error confined to a few elements of a large
tensor is diluted by roughly :math:`1/\sqrt{n}`, so the element-wise mode
remains the sharper tool where it is affordable. Directions are drawn per
tensor, or jointly over all checked tensors (``joint=True``).
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import numpy as np

from minitransformer import backend

__all__ = ["DEFAULT_EPS", "numerical_grad", "numerical_directional"]

DEFAULT_EPS = 1e-6
"""Step of the central differences (float64)."""


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def looks_like_array(v) -> bool:
    """Arrays of any backend and NumPy scalars (NumPy reductions return those), not Python numbers."""
    if isinstance(v, np.generic):
        return True
    return v is not None and hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, (int, float))


def is_float_array(v, name: str = "input") -> bool:
    """True for floating-point arrays of the active backend (the differentiable inputs)."""
    if not looks_like_array(v) or getattr(v.dtype, "kind", "") != "f":
        return False
    if not backend.is_device_array(v):
        raise TypeError(
            f"gradcheck: {name!r} is a {type(v).__name__}, not an array of the active backend "
            f"{backend.name()!r}; create it with backend.asarray(...) or xp.* first"
        )
    return True


def require_float64(x, name: str) -> None:
    if x.dtype != np.float64:
        raise ValueError(
            f"gradcheck: {name!r} has dtype {x.dtype}; finite-difference checks need float64 "
            "(in float32 the rounding error of a central difference is ~1e-2). Build it under "
            "backend.dtype_scope('float64') or cast it with .astype(xp.float64)."
        )


def as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _snapshot(outs) -> list:
    """Copies of the float outputs (a later forward pass may reuse their buffers)."""
    return [o.copy() if looks_like_array(o) else o for o in as_list(outs)]


def _difference(plus, minus, dout) -> float:
    """``L(+) - L(-)``: for scalars directly, for arrays as ``sum((out+ - out-) * dout)``."""
    if dout is None:
        if looks_like_array(plus) and plus.size != 1:
            raise ValueError(
                f"gradcheck: the function returned an array of shape {tuple(plus.shape)}; "
                "return a scalar or pass dout= to weight the outputs"
            )
        return float(plus) - float(minus)
    plus, minus, dout = as_list(plus), as_list(minus), as_list(dout)
    if not (len(plus) == len(minus) == len(dout)):
        raise ValueError(f"gradcheck: {len(plus)} output(s) but {len(dout)} dout array(s)")
    total = 0.0
    for p, m, r in zip(plus, minus, dout):
        if r is None:
            continue
        if tuple(p.shape) != tuple(r.shape):
            raise ValueError(f"gradcheck: output of shape {tuple(p.shape)} but dout of shape {tuple(r.shape)}")
        total += float(((p - m) * r).sum())
    return total


# ---------------------------------------------------------------------------
# Numerical derivatives
# ---------------------------------------------------------------------------
def numerical_grad(f: Callable[[], Any], x, eps: float = DEFAULT_EPS, dout=None) -> np.ndarray:
    r"""Central-difference gradient of ``f()`` with respect to the array ``x``.

    For every element :math:`i`, ``x[i]`` is set to :math:`x_i+\varepsilon`,
    ``f()`` is called, then to :math:`x_i-\varepsilon`, ``f()`` again, and
    finally restored to the exact original value (so ``x`` is bit-for-bit
    unchanged afterwards). The estimate

    .. math:: g_i = \frac{f(x+\varepsilon e_i) - f(x-\varepsilon e_i)}{(x_i+\varepsilon)-(x_i-\varepsilon)}

    has truncation error :math:`O(\varepsilon^2)` and rounding error about
    :math:`u|f|/\varepsilon` (see the module docstring). It costs ``2 * x.size``
    calls of ``f``: meant for tiny shapes.

    Args:
        f: a function of no arguments that reads ``x`` (the very array object,
            not a copy) and returns a scalar (a Python float or a 0-d/size-1
            array). With ``dout`` it may return an array or a tuple of arrays
            instead; the scalar is then ``sum(out * dout)``, differenced output
            by output before the weighted sum (see "Scalarising" above).
        x: a float64 array of the active backend, modified in place while the
            function runs.
        eps: the step :math:`\varepsilon`.
        dout: optional weights with the structure of ``f()``'s output.

    Returns:
        A host ``numpy.ndarray`` (float64) of ``x``'s shape.
    """
    if not is_float_array(x, "x"):
        raise ValueError(f"gradcheck: x must be a floating-point array, got {type(x).__name__}")
    require_float64(x, "x")
    grad = np.zeros(tuple(x.shape), dtype=np.float64)
    for idx in np.ndindex(*grad.shape):
        orig = x[idx].item()  # a Python float: exact for float64, and not a view (CuPy)
        hi, lo = orig + eps, orig - eps
        try:
            x[idx] = hi
            plus = _snapshot(f()) if dout is not None else f()
            x[idx] = lo
            minus = _snapshot(f()) if dout is not None else f()
        finally:
            x[idx] = orig
        if dout is not None and not isinstance(dout, (tuple, list)):
            plus, minus = plus[0], minus[0]
        grad[idx] = _difference(plus, minus, dout) / (hi - lo)
    return grad


def numerical_directional(f: Callable[[], Any], pairs: Iterable, eps: float = DEFAULT_EPS,
                          dout=None) -> float:
    r"""Central-difference directional derivative of ``f()``.

    ``pairs`` is a list of ``(x, u)``: device arrays ``x`` (float64, read by
    ``f``) and host arrays ``u`` of the same shapes, together one direction.
    All ``x`` are moved simultaneously to :math:`x \pm \varepsilon u`, and the
    result is :math:`(f(x+\varepsilon u) - f(x-\varepsilon u)) / 2\varepsilon`,
    an :math:`O(\varepsilon^2)` estimate of :math:`\sum \langle \nabla_x f, u\rangle`.
    Every ``x`` is restored exactly (from a copy) afterwards. ``dout`` as in
    :func:`numerical_grad`.
    """
    pairs = [(x, backend.asarray(np.asarray(u, dtype=np.float64))) for x, u in pairs]
    saved = [x.copy() for x, _ in pairs]
    try:
        for (x, u), x0 in zip(pairs, saved):
            x[...] = x0 + eps * u
        plus = _snapshot(f()) if dout is not None else f()
        for (x, u), x0 in zip(pairs, saved):
            x[...] = x0 - eps * u
        minus = _snapshot(f()) if dout is not None else f()
    finally:
        for (x, _), x0 in zip(pairs, saved):
            x[...] = x0
    if dout is not None and not isinstance(dout, (tuple, list)):
        plus, minus = plus[0], minus[0]
    return _difference(plus, minus, dout) / (2.0 * eps)

