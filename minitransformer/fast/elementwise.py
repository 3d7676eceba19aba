r"""Fast GELU: the exact form through a table, in cache-sized blocks on the thread pool.

The reference (:mod:`minitransformer.nn.elementwise`) evaluates :math:`\Phi` with
SciPy's ``erf``. Here :math:`\Phi` is :math:`\tilde\Phi`, the piecewise-cubic
Hermite interpolant of :math:`\Phi` on the grid :math:`x_k = k h`,
:math:`h = 1/64`, over :math:`[-10, 10]`: on each cell the cubic that matches
:math:`\Phi` and its density :math:`\varphi` at both ends (values computed once
with Python's ``math.erfc``, kept in a small table). Outside the grid
:math:`\tilde\Phi` is 0 or 1. Per element this is one table lookup and two short
polynomials, about 20 array passes instead of an ``erf`` and an ``exp``.

**The documented bound.** :math:`|\tilde\Phi - \Phi| < 10^{-10}` (the Hermite
bound :math:`h^4 \max|\Phi^{(4)}| / 384`) and :math:`|\tilde\Phi' - \varphi| < 2\cdot10^{-8}`,
so the fast exact GELU differs from the reference by at most :math:`10^{-10}|x|`
in y and :math:`2\cdot10^{-8}|x| + 10^{-10}` in dy/dx (``tests/fast`` checks
both). The backward differentiates the *interpolant*, so forward and backward
describe one and the same function and finite-difference checks pass.

**float32 with Numba: no table.** The table's compiled loop is a lookup per element
(a gather), which does not vectorise: 4 ns an element on one thread. For float32
arrays the compiled loop evaluates :math:`\Phi` from two polynomials in float32
arithmetic instead (``elementary.gelu32``: erf near 0, the scaled erfc beyond), which
vectorises. Its bound, measured on a dense grid of [-20, 20] and tested, is
:math:`2\cdot10^{-7}|x|` in y and :math:`2\cdot10^{-7}` in dy/dx
(``elementary.GELU32_Y_BOUND``, ``GELU32_DYDX_BOUND``): about float32's own rounding of
the reference, which is :math:`1.1\cdot10^{-7}|x|`. Here dy/dx is :math:`\Phi + x\varphi`
from the same approximations, not the derivative of the approximated y; float64 (the
finite-difference checks) keeps the table.

The tanh form is computed as in the reference, with ``out=`` into the result,
and both run in blocks of 512 KiB (:func:`_blocked`). On a GPU the exact form is one
CUDA kernel that calls ``erf`` itself, no table (:mod:`minitransformer.fast.engine.cuda`).
"""
from __future__ import annotations

import math

import numpy as np

from minitransformer.backend import xp
from minitransformer.fast.engine import compiled, cuda
from minitransformer.fast.engine.parallel import parallel_for

_SQRT_HALF = math.sqrt(0.5)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


# ---------------------------------------------------------------------------
# Exact GELU: Phi as a piecewise-cubic Hermite interpolant
# ---------------------------------------------------------------------------
_CELLS_PER_UNIT = 64  # 1/h: knots x_k = k / 64
_X_MAX = 10  # the grid covers [-10, 10]; beyond it Phi~ is exactly 0 or 1
_K_MAX = _X_MAX * _CELLS_PER_UNIT  # 640: knot indices k = -640 .. 640
_TABLES: dict = {}


def _hermite_table():
    r"""(2*640 + 2, 4) float64 NumPy array: row ``j`` holds :math:`(c_0, c_1, c_2, c_3)`,
    the cubic :math:`c_0 + c_1 s + c_2 s^2 + c_3 s^3` (:math:`s \in [0, 1)`) of one cell.

    Row 0 is :math:`x < -10` (:math:`\tilde\Phi = 0`), row 1281 is :math:`x \ge 10`
    (:math:`\tilde\Phi = 1`), and row :math:`j` in between is the cell
    :math:`[x_k, x_{k+1})` with :math:`k = j - 641`. On a cell, with
    :math:`x = x_k + s h`, the Hermite cubic through :math:`\Phi_k, \Phi_{k+1}`
    with slopes :math:`m_k = h\varphi(x_k)`, :math:`m_{k+1} = h\varphi(x_{k+1})` (in units of s) is

    .. math:: c_0 = \Phi_k,\ c_1 = m_k,\ c_2 = 3(\Phi_{k+1} - \Phi_k) - 2m_k - m_{k+1},\
              c_3 = 2(\Phi_k - \Phi_{k+1}) + m_k + m_{k+1}.
    """
    h = 1.0 / _CELLS_PER_UNIT
    xk = np.arange(-_K_MAX, _K_MAX + 1) * h  # (1281,) knots, exact multiples of h
    cdf = np.array([0.5 * math.erfc(-v * _SQRT_HALF) for v in xk])  # (1281,) Phi(x_k), accurate in the tails
    slope = h * np.exp(-0.5 * xk * xk) / math.sqrt(2.0 * math.pi)  # (1281,) h * phi(x_k)
    p0, p1, m0, m1 = cdf[:-1], cdf[1:], slope[:-1], slope[1:]  # (1280,) each: both ends of each cell
    cells = np.stack([p0, m0, 3.0 * (p1 - p0) - 2.0 * m0 - m1, 2.0 * (p0 - p1) + m0 + m1], axis=1)  # (1280, 4)
    return np.concatenate([[[0.0, 0.0, 0.0, 0.0]], cells, [[1.0, 0.0, 0.0, 0.0]]])  # (1282, 4)


def _table(dtype):
    """The Hermite table as a device array of ``dtype``, built once per backend and dtype."""
    from minitransformer import backend  # late: the active backend may change
    key = (backend.name(), np.dtype(dtype).str)
    if key not in _TABLES:
        _TABLES[key] = backend.asarray(_hermite_table(), dtype=dtype)  # (1282, 4)
    return _TABLES[key]


def _gelu_exact(x, y, dydx):
    r"""Write :math:`y = x\tilde\Phi(x)` into ``y`` and dy/dx into ``dydx``, one cubic
    per element. x, y, dydx: (n,).

    With :math:`v = x/h` (exact: h is a power of 2), the cell is
    :math:`k = \lfloor v\rfloor` and :math:`s = v - k \in [0, 1)` (also exact).
    Clamping v to [-641, 640.5] first sends every x outside the grid to row 0 or 1281.

    .. math:: \tilde\Phi = c_0 + s(c_1 + s(c_2 + s c_3)),\qquad
              \tilde\Phi' = \frac{d\tilde\Phi}{ds}\frac{ds}{dx} = \big(c_1 + 2s(c_2 + \tfrac32 s c_3)\big)/h,

    and :math:`dy/dx = \tilde\Phi + x\,\tilde\Phi'`.
    """
    v = x * _CELLS_PER_UNIT  # (n,) x / h
    xp.clip(v, -_K_MAX - 1, _K_MAX + 0.5, out=v)  # outside [-10, 10]: a constant end row
    k = xp.floor(v)  # (n,) cell index k, as a float
    s = v  # (n,)
    s -= k  # position inside the cell, in [0, 1)
    k += _K_MAX + 1  # table row j = k + 641, in [0, 1281]
    j = k.astype(xp.int32)  # (n,) table rows
    xp.clip(j, 0, 2 * _K_MAX + 1, out=j)  # only a NaN input lands outside; its output stays NaN (s is NaN)
    c = xp.take(_table(x.dtype), j, axis=0)  # (n, 4) the cells' coefficients
    c0, c1, c2, c3 = c[:, 0], c[:, 1], c[:, 2], c[:, 3]  # (n,) each
    c3s = c3 * s  # (n,)
    cdf = c3s + c2  # (n,)
    cdf *= s
    cdf += c1
    cdf *= s
    cdf += c0  # Phi~(x)
    pdf = c3s * 1.5  # (n,)
    pdf += c2
    pdf *= s
    pdf *= 2.0
    pdf += c1
    pdf *= _CELLS_PER_UNIT  # Phi~'(x) = (dPhi~/ds) / h
    pdf *= x
    xp.add(pdf, cdf, out=dydx)  # dy/dx = Phi~ + x Phi~'
    xp.multiply(cdf, x, out=y)  # y = x Phi~


# Element-wise work of about 20 array passes (exact GELU) runs faster when done in
# blocks that stay in the CPU cache than over a large array at once, and the blocks
# are independent, so the CPU's cores can share them (see minitransformer.fast.engine.parallel).
_BLOCK = 1 << 17  # elements: 512 KiB of float32, large enough that threads rarely wait for the GIL


def _blocked(fn, x):
    """Run an element-wise ``fn(x, y, dydx)``, which writes y and dy/dx of a 1-D array,
    in cache-sized blocks spread over the CPU threads (a GPU gets the whole array: one
    launch per operation is cheaper there). x: (...). Returns y, dydx: (...)."""
    from minitransformer import backend  # late: the active backend may change
    flat = x.reshape(-1)  # (N,)
    y, dydx = xp.empty_like(flat), xp.empty_like(flat)  # (N,), (N,)
    if x.size <= 2 * _BLOCK or backend.name() == "cupy":
        fn(flat, y, dydx)
    else:
        def block(i):  # one block of memory, flat[i : i + _BLOCK]
            fn(flat[i:i + _BLOCK], y[i:i + _BLOCK], dydx[i:i + _BLOCK])

        parallel_for(block, range(0, flat.size, _BLOCK))  # over memory blocks, not over batch/time
    return y.reshape(x.shape), dydx.reshape(x.shape)


def _gelu_tanh(x, y, dydx):
    """Write the tanh-approximate GELU of x into ``y`` and its derivative into ``dydx``.
    x, y, dydx: (n,)."""
    # y = x/2 (1 + th), th = tanh(u), u = c (x + 0.044715 x^3)
    th = xp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x))  # (n,)
    du_dx = _SQRT_2_OVER_PI * (1.0 + 3 * 0.044715 * x * x)  # (n,)
    xp.add(0.5 * (1.0 + th), 0.5 * x * (1.0 - th * th) * du_dx, out=dydx)  # 1 - th^2 never overflows
    xp.multiply(0.5 * x, 1.0 + th, out=y)


def gelu_forward(x, approximate: str = "none"):
    """As :func:`minitransformer.nn.elementwise.gelu_forward` (exact form: within the
    documented bounds of the module docstring). With Numba, the exact form is one
    compiled loop (:mod:`minitransformer.fast.engine.compiled`) that writes y and dy/dx in one pass
    (for float32, without the table)."""
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    if approximate == "none" and cuda.usable(x):  # a GPU: one fused launch, erf itself (no table)
        y, dydx = cuda.gelu_exact(xp.ascontiguousarray(x).reshape(-1))  # (N,), (N,)
        return y.reshape(x.shape), dydx.reshape(x.shape)
    if approximate == "none" and compiled.usable(x):  # one compiled loop (threaded if large)
        flat = xp.ascontiguousarray(x).reshape(-1)  # (N,)
        y, dydx = xp.empty_like(flat), xp.empty_like(flat)  # (N,), (N,)
        if flat.dtype == np.float32:  # no table: float32 arithmetic, within its own bound (module notes)
            compiled.gelu_exact_float32(flat, y, dydx)
        else:
            compiled.gelu_exact(flat, _table(x.dtype), y, dydx)
        return y.reshape(x.shape), dydx.reshape(x.shape)
    # The tanh form stays NumPy: its 1 + tanh(u) cancels for u < -5, so a libm tanh one
    # ulp away from NumPy's moves y by 1e-3 relative there, and the two sets would differ.
    return _blocked(_gelu_exact if approximate == "none" else _gelu_tanh, x)
