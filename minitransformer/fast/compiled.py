r"""Compiled CPU loops for the element-wise kernels (optional: Numba).

NumPy evaluates ``y = x * cdf`` as one pass over memory per operator, so a
kernel of twenty operators reads and writes its arrays twenty times. With
`Numba <https://numba.pydata.org>`_ installed (``pip install minitransformer[fast]``)
the fast kernels below run as one compiled loop each, spread over the CPU's
cores by Numba (``prange``, as many threads as :mod:`minitransformer.fast.parallel`
uses): one read of each input and one write of each output.

Two measured choices (``benchmarks/RESULTS.md``): Numba's ``workqueue`` threads,
whose threads sleep as soon as a loop ends (the OpenMP layer's spin and take the
cores from the BLAS threads of the next product: the small model's training step
ran 1.7x slower with it); and ``prange`` loops rather than serial loops handed to
the library's thread pool (Numba compiles the same loop body about 3.5x faster
per element under ``parallel=True``). The work queue serves one caller at a
time, so :func:`usable` says no on any other thread than the main one.

The math is that of the NumPy fast kernels they replace, written out per
element or per row; ``tests/fast`` proves each one equal to its reference
kernel. Without Numba (or with ``MINITRANSFORMER_NUMBA=0``), or on the GPU, the
NumPy versions run instead: :func:`usable` decides per call.

Sums run in float64 whatever the array dtype (a row of LayerNorm, the parameter
gradients), and every sum is split the same way whatever the number of threads
(parts of 256 rows), so the results do not depend on the thread count.
"""
from __future__ import annotations

import os
import threading
import types

import numpy as np

try:
    if os.environ.get("MINITRANSFORMER_NUMBA", "1").strip() == "0":
        raise ImportError("turned off by MINITRANSFORMER_NUMBA=0")
    import numba
    from numba import prange
except ImportError:  # the NumPy fast kernels run instead
    numba = None
    prange = range

AVAILABLE = numba is not None
if AVAILABLE and "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER = "workqueue"  # see the module notes
_enabled = {"on": AVAILABLE, "threads": None}
ROWS_PER_PART = 256  # rows per partial sum of a parameter gradient: fixed, so sums never depend on threads


def set_enabled(on: bool) -> None:
    """Use the compiled loops (True, if Numba is installed) or the NumPy kernels (False)."""
    _enabled["on"] = bool(on) and AVAILABLE


def enabled() -> bool:
    return _enabled["on"]


MIN_SIZE = 1 << 15  # elements: below this a loop runs on the calling thread alone (Kernel)


def usable(*arrays) -> bool:
    """True when the compiled loops can take these arrays: Numba is on, this is the
    main thread, and every array is a host NumPy array of float32 or float64 (not
    CuPy, not the strict stand-in)."""
    if not _enabled["on"] or threading.current_thread() is not threading.main_thread():
        return False
    if not all(type(a) is np.ndarray and a.dtype in (np.float32, np.float64) for a in arrays):
        return False
    from minitransformer.fast import parallel  # as many threads as the library's pool
    n = min(parallel.threads(), numba.config.NUMBA_NUM_THREADS)
    if _enabled["threads"] != n:
        numba.set_num_threads(n)
        _enabled["threads"] = n
    return True


def _jit(fn=None, *, vectorize_sums: bool = False):
    """Compile ``fn`` on first call (a :class:`Kernel`: over the threads, or on this
    thread alone for small arrays), cached on disk.

    ``vectorize_sums`` allows reassociation and fused multiply-adds (and nothing else
    of ``fastmath``: NaN and infinity keep their IEEE meaning), so that row sums are
    vectorized: LayerNorm at D = 64 ran 2.5x faster. Only for loops whose sums it
    may regroup; not for GELU, where it could expand (v - k) c into v c - k c and
    lose the digits of the difference."""
    if fn is None:
        return lambda f: _jit(f, vectorize_sums=vectorize_sums)
    if numba is None:
        return fn
    return Kernel(fn, {"reassoc", "contract"} if vectorize_sums else False)


class Kernel:
    """One compiled loop in two builds: its ``prange`` spread over the threads, and the
    same loop on the calling thread alone (``prange`` is then ``range``). A call takes
    the serial build when its first array has fewer than :data:`MIN_SIZE` elements:
    waking the threads costs about 65 microseconds (measured on 2 cores), more than a
    small loop takes (the exact GELU of one decoding step, (64, 1, 256), ran in 118
    microseconds threaded and about 25 alone). Each element or row is computed by the
    same code either way, and the partial sums are split by :data:`ROWS_PER_PART`, not
    by thread: both builds give identical results (``tests/fast/test_compiled.py``)."""

    def __init__(self, fn, fastmath):
        self.parallel = numba.njit(parallel=True, cache=True, fastmath=fastmath)(fn)
        # a function object of its own, so that the on-disk caches of the two builds never mix
        alone = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                                   fn.__closure__)
        alone.__qualname__, alone.__doc__ = fn.__qualname__ + "_serial", fn.__doc__
        self.serial = numba.njit(parallel=False, cache=True, fastmath=fastmath)(alone)
        self.__doc__, self.__name__ = fn.__doc__, fn.__name__

    def __call__(self, *args):
        return (self.parallel if args[0].size >= MIN_SIZE else self.serial)(*args)


# ---------------------------------------------------------------------------
# Exact GELU through the Hermite table of minitransformer.fast.elementwise
# ---------------------------------------------------------------------------
@_jit
def gelu_exact(x, table, y, dydx):
    r"""y = x\tilde\Phi(x) and dy/dx = \tilde\Phi + x\tilde\Phi', the table's cubic per element.
    x, y, dydx: (n,); table: (1282, 4), row j = cell k = j - 641 of width 1/64."""
    for i in prange(x.shape[0]):
        xi = x[i]
        if xi != xi:  # NaN in, NaN out (and no table row for it)
            y[i] = xi
            dydx[i] = xi
            continue
        v = min(max(xi * 64.0, -641.0), 640.5)  # x / h, clamped: outside [-10, 10] an end row
        k = np.floor(v)
        s = v - k  # in [0, 1)
        j = int(k) + 641
        c0, c1, c2, c3 = table[j, 0], table[j, 1], table[j, 2], table[j, 3]
        cdf = ((c3 * s + c2) * s + c1) * s + c0  # Phi~(x)
        pdf = ((1.5 * c3 * s + c2) * 2.0 * s + c1) * 64.0  # Phi~'(x) = (dPhi~/ds) / h
        y[i] = xi * cdf
        dydx[i] = cdf + xi * pdf


# ---------------------------------------------------------------------------
# LayerNorm, one row per iteration
# ---------------------------------------------------------------------------
@_jit(vectorize_sums=True)
def layernorm_forward(x, w, b, eps, y, xhat, rstd):
    r"""Per row r of x (N, D): \mu, \sigma^2 (biased), \hat x = (x - \mu)/\sqrt{\sigma^2 + \epsilon},
    y = \hat x w + b. Writes y, xhat (N, D) and rstd (N,)."""
    N, D = x.shape
    for r in prange(N):
        mu = 0.0
        for d in range(D):
            mu += x[r, d]
        mu /= D
        var = 0.0
        for d in range(D):
            t = x[r, d] - mu
            var += t * t
        rs = 1.0 / np.sqrt(var / D + eps)
        rstd[r] = rs
        for d in range(D):
            h = (x[r, d] - mu) * rs
            xhat[r, d] = h
            y[r, d] = h * w[d] + b[d]


@_jit(vectorize_sums=True)
def layernorm_backward(dy, xhat, rstd, w, dx, dw_parts, db_parts):
    r"""dx = rstd (g - \bar g - \hat x\,\overline{g\hat x}) per row, g = dy w; and each part's
    \sum dy\hat x, \sum dy over its rows. dy, xhat, dx: (N, D); rstd: (N,);
    dw_parts, db_parts: (P, D) float64, part p = rows p*256 .. p*256+255 (ROWS_PER_PART)."""
    N, D = dy.shape
    for p in prange(dw_parts.shape[0]):
        for d in range(D):
            dw_parts[p, d] = 0.0
            db_parts[p, d] = 0.0
        for r in range(p * ROWS_PER_PART, min(N, (p + 1) * ROWS_PER_PART)):
            g_mean = 0.0
            gx_mean = 0.0
            for d in range(D):
                g = dy[r, d] * w[d]
                g_mean += g
                gx_mean += g * xhat[r, d]
                dw_parts[p, d] += dy[r, d] * xhat[r, d]
                db_parts[p, d] += dy[r, d]
            g_mean /= D
            gx_mean /= D
            for d in range(D):
                dx[r, d] = (dy[r, d] * w[d] - g_mean - xhat[r, d] * gx_mean) * rstd[r]


def parts(N: int) -> int:
    """How many partial sums a gradient over N rows is split into (fixed, whatever the threads)."""
    return max(1, -(-N // ROWS_PER_PART))

