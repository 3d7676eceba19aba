r"""Compiled CPU loops for the element-wise and row-wise kernels (optional: Numba):
the exact GELU, LayerNorm, the cross-entropy with its softmax, and attention's masked softmax.

NumPy evaluates ``y = x * cdf`` as one pass over memory per operator, so a
kernel of twenty operators reads and writes its arrays twenty times. With
`Numba <https://numba.pydata.org>`_ installed (``pip install minitransformer[fast]``)
the fast kernels below run as one compiled loop each, spread over the CPU's
cores by Numba (``prange``, as many threads as :mod:`minitransformer.fast.engine.parallel`
uses): an element-wise loop reads each input once and writes each output once; a
row-wise loop makes its few passes over a row while the row is in the core's cache.

Measured choices (``benchmarks/RESULTS.md``):

* **One pool of threads** (:func:`one_pool`): OpenMP's threads (Numba's ``omp`` layer)
  where it loads and the compiled loops can call BLAS themselves
  (:mod:`minitransformer.fast.engine.blas` asks for them on import). With two threads or
  more, attention then runs as one compiled loop (:mod:`minitransformer.fast.fused_attention`)
  and the linear layer's products as compiled loops, with BLAS on one thread inside them, so every
  kernel of a step runs on the same threads, which spin a moment after each loop and so
  are awake for the next. Two pools, OpenBLAS's for the products and Numba's work queue
  for the rest, each put their threads to sleep after a call, and on a 2-core VM a
  sleeping thread took about 250 us to wake: LayerNorm's (4096, 64) forward ran in
  420-550 us on the work queue's two threads against 280 on one, and in 160 on OpenMP's
  two. The small model's training step ran about 1.2x faster with the one pool.
* **Numba's ``workqueue``** otherwise (no ILP64 OpenBLAS to call, or no OpenMP runtime),
  whose threads sleep as soon as a loop ends: OpenMP's spin, and would take the cores from
  the BLAS threads of the next NumPy product (the small model's step ran 1.4x slower with
  them when the products stayed NumPy's).
* ``prange`` loops rather than serial loops handed to the library's thread pool for the
  element-wise and row-wise kernels (measured 3.5x faster an element on an Intel VM in 2026-11).
* Each loop's serial build whenever the library runs one thread (a data-parallel rank: the
  work queue's one worker stalled steps), or an array is small. Only the main thread calls
  the threaded builds (:func:`usable`: the work queue serves one caller at a time); a piece of
  work on the library's pool calls a serial build itself (:func:`serial_usable`:
  attention's masked softmax, one block of sequences a piece).

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

from minitransformer.fast.engine.elementary import ONE_OVER_SQRT_2PI_32, exp32_nonpositive, exp_nonpositive, gelu32

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
    numba.config.THREADING_LAYER = "workqueue"  # unless blas prefers OpenMP's (prefer_threading_layer)
_enabled = {"on": AVAILABLE, "threads": None, "layer": None}
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
    CuPy, not the strict stand-in). The first call starts the threads."""
    if not _enabled["on"] or threading.current_thread() is not threading.main_thread():
        return False
    if not all(type(a) is np.ndarray and a.dtype in (np.float32, np.float64) for a in arrays):
        return False
    from minitransformer.fast.engine import parallel  # as many threads as the library's pool
    n = min(parallel.threads(), numba.config.NUMBA_NUM_THREADS)
    if _enabled["threads"] != n:
        numba.set_num_threads(n)  # starts the threads (the first time), of the kind chosen by then
        _enabled["threads"], _enabled["layer"] = n, numba.threading_layer()
    return True


def prefer_threading_layer(layer: str) -> None:
    """Start Numba's threads as ``layer`` ("omp" or "workqueue"), unless they have started or
    ``NUMBA_THREADING_LAYER`` names one: :mod:`minitransformer.fast.engine.blas` asks for OpenMP's
    where it can call BLAS from the loops (module notes)."""
    if AVAILABLE and _enabled["layer"] is None and "NUMBA_THREADING_LAYER" not in os.environ:
        numba.config.THREADING_LAYER = layer


def one_pool() -> bool:
    """True when the threaded builds run on OpenMP's threads (known after the first
    :func:`usable`). With two threads or more (:func:`minitransformer.fast.engine.blas.on_pool`),
    attention then runs as one compiled loop and the linear layer's products as compiled loops too."""
    return _enabled["layer"] == "omp"


def threads() -> int:
    """The threads a threaded build runs on (1 until the first :func:`usable`)."""
    return _enabled["threads"] or 1


def serial_usable(*arrays) -> bool:
    """True when a loop's serial build (``kernel.serial``) can take these arrays on this thread,
    whichever it is: Numba is on and every array is a host NumPy array of float32 or float64.
    The serial build holds no thread pool and releases Python's lock, so the pieces of work
    that :mod:`minitransformer.fast.engine.parallel` hands to its threads may each call it."""
    return _enabled["on"] and all(type(a) is np.ndarray and a.dtype in (np.float32, np.float64) for a in arrays)


def _jit(fn=None, *, vectorize_sums: bool = False, fused_multiply_add: bool = False):
    """Compile ``fn`` on first call (a :class:`Kernel`: over the threads, or on this
    thread alone for small arrays and when the library runs one thread), cached on disk.

    ``vectorize_sums`` allows reassociation and fused multiply-adds (and nothing else
    of ``fastmath``: NaN and infinity keep their IEEE meaning), so that row sums are
    vectorized: LayerNorm at D = 64 ran 2.5x faster. Only for loops whose sums it
    may regroup; not for GELU, where it could expand (v - k) c into v c - k c and
    lose the digits of the difference. ``fused_multiply_add`` allows only the
    fused multiply-adds (a b + c with one rounding, never regrouped): the float32 GELU's
    polynomials, whose chains of multiply-then-add bound its speed (1.89 -> 1.53 ns an
    element on one core, within the same documented bound)."""
    if fn is None:
        return lambda f: _jit(f, vectorize_sums=vectorize_sums, fused_multiply_add=fused_multiply_add)
    if numba is None:
        return fn
    if vectorize_sums:
        return Kernel(fn, {"reassoc", "contract"})
    return Kernel(fn, {"contract"} if fused_multiply_add else False)


class Kernel:
    """One compiled loop in two builds: its ``prange`` spread over the threads, and the
    same loop on the calling thread alone (``prange`` is then ``range``). A call takes
    the serial build when its first array has fewer than :data:`MIN_SIZE` elements:
    waking the threads costs about 65 microseconds (measured on 2 cores), more than a
    small loop takes (the exact GELU of one decoding step, (64, 1, 256), ran in 118
    microseconds threaded and about 25 alone). It takes the serial build too when the
    library runs one thread (:func:`usable` set Numba's count to 1, as in each
    data-parallel rank): the work queue with one thread still hands each loop to a
    thread of its own and waits, and inside training steps that wait stalled now and
    then for 15-75 ms (the small model's GELU: 2.1-2.3 ms a call alone, spikes in
    most steps threaded; the step 72-75 ms serial against 94-170 ms threaded, one
    thread, 2-core AMD EPYC VM). Each element or row is computed by the
    same code either way, and the partial sums are split by :data:`ROWS_PER_PART`, not
    by thread, so no result depends on the number of threads. Both builds give identical
    results, except in a loop whose sums may be regrouped (``regroups_sums``: ``vectorize_sums``),
    where the compiler may group a row's sum one way in each build (Numba 0.68 does, at D = 7):
    the two then differ by rounding, a few units in the last place
    (``tests/fast/test_compiled.py``)."""

    def __init__(self, fn, fastmath):
        # error_model "numpy": a division by zero gives inf or NaN, as in NumPy, instead of
        # raising; Python's model puts a test before every division, which keeps a serial
        # loop from being vectorised (a parallel one is compiled this way in any case)
        self.parallel = numba.njit(parallel=True, cache=True, fastmath=fastmath, error_model="numpy")(fn)
        # a function object of its own, so that the on-disk caches of the two builds never mix
        alone = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__ + "_serial", fn.__defaults__,
                                   fn.__closure__)
        alone.__qualname__, alone.__doc__ = fn.__qualname__ + "_serial", fn.__doc__
        self.serial = numba.njit(parallel=False, cache=True, fastmath=fastmath, error_model="numpy",
                                 nogil=True)(alone)
        self.__doc__, self.__name__ = fn.__doc__, fn.__name__
        self.regroups_sums = bool(fastmath) and "reassoc" in fastmath

    def __call__(self, *args):
        threaded = args[0].size >= MIN_SIZE and (_enabled["threads"] or 2) > 1
        return (self.parallel if threaded else self.serial)(*args)


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
    r""":math:`dx = \mathrm{rstd}\,(g - \bar g - \hat x\,\overline{g\hat x})` per row, :math:`g = dy\,w`; and each
    part's :math:`\sum dy\,\hat x` and :math:`\sum dy` over its rows. dy, xhat, dx: (N, D); rstd: (N,);
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


# ---------------------------------------------------------------------------
# Exact GELU of float32 arrays, in float32 arithmetic and without the table
# ---------------------------------------------------------------------------
# Phi and e^{-x^2/2} of each element from minitransformer.fast.engine.elementary.gelu32 (two
# polynomials, no table lookup, so the loop vectorises); its bound is GELU32_Y_BOUND, GELU32_DYDX_BOUND
# there.
_ZERO32, _ONE32 = np.float32(0.0), np.float32(1.0)

@_jit(fused_multiply_add=True)
def gelu_exact_float32(x, y, dydx):
    r"""y = x\Phi(x), dy/dx = \Phi(x) + x\varphi(x) in float32 arithmetic; x, y, dydx: (n,) float32."""
    for i in prange(x.shape[0]):
        xi = x[i]
        cdf, e = gelu32(xi)
        y[i] = xi * cdf
        dydx[i] = cdf + xi * (ONE_OVER_SQRT_2PI_32 * e)


# ---------------------------------------------------------------------------
# Attention's masked softmax of float32 logits, row by row in place
# ---------------------------------------------------------------------------
@_jit(vectorize_sums=True)
def masked_softmax_float32(s, blocked):
    r"""Per row of the logits s (b, H, q, k), in place: :math:`P_{ij} = e^{S_{ij} - m_i} / \sum_j e^{S_{ij} - m_i}`
    over the keys the row may see (``blocked`` False), :math:`m_i` their largest logit; a blocked key
    gets exactly 0, and so does every key of a row that may see none (or whose logits are all
    :math:`-\infty`); a NaN or :math:`+\infty` among the seen logits makes the row NaN. The exponential is
    :func:`~minitransformer.fast.engine.elementary.exp32_nonpositive`, the sum runs in float64.
    blocked: (b, H, q, k) bool, a broadcast view."""
    B, H, Q, K = s.shape
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        for i in range(Q):
            # four passes over the row, each a loop the compiler vectorises (the masked store and
            # the max in one loop did not: those two alone took 2.5 ms on small's (64, 4, 64, 64)
            # logits, against 0.1 + 0.4 ms as two loops)
            for j in range(K):
                s[b, h, i, j] = -np.inf if blocked[b, h, i, j] else s[b, h, i, j]
            top = -np.inf
            for j in range(K):
                top = max(top, s[b, h, i, j])
            if top == -np.inf:  # no key to see, or every seen logit -inf or NaN (max skips NaN)
                fill = _ZERO32  # a row of zeros, as the reference gives; NaN if a seen logit is NaN
                for j in range(K):
                    if s[b, h, i, j] != s[b, h, i, j]:
                        fill = s[b, h, i, j]
                for j in range(K):
                    s[b, h, i, j] = fill
                continue
            total = 0.0
            for j in range(K):
                e = exp32_nonpositive(s[b, h, i, j] - top)  # a blocked key: exactly 0
                s[b, h, i, j] = e
                total += e
            scale = _ONE32 / np.float32(total)
            for j in range(K):
                s[b, h, i, j] *= scale


# ---------------------------------------------------------------------------
# Cross-entropy with label smoothing, one row per iteration
# ---------------------------------------------------------------------------
@_jit(vectorize_sums=True)
def cross_entropy_forward(x, t, eps, p, loss):
    r"""Per row r of the logits x (N, V), with :math:`z = x - \max x` and :math:`lse = \log\sum_j e^{z_j}`:
    :math:`p = e^{z - lse}` (N, V), and loss (N,) with
    :math:`loss_r = -(1-\epsilon)(z_t - lse) - \frac{\epsilon}{V-1}\sum_{j \ne t}(z_j - lse)`, t = t[r] (N,) int.
    A row whose largest logit is NaN or infinite is NaN throughout, as the reference's arithmetic makes it."""
    N, V = x.shape
    for r in prange(N):
        m = x[r, 0]
        for j in range(1, V):
            v = x[r, j]
            m = v if (v > m or v != v) else m  # a NaN, once met, stays
        if not abs(m) < np.inf:  # NaN, +inf (inf - inf) or a row of -inf (-inf - -inf)
            for j in range(V):
                p[r, j] = np.nan
            loss[r] = np.nan
            continue
        z_sum = 0.0
        total = 0.0
        for j in range(V):
            z = np.float64(x[r, j]) - m  # <= 0, or -inf
            z_sum += z
            e = exp_nonpositive(z)
            p[r, j] = e
            total += e
        inv = 1.0 / total
        for j in range(V):
            p[r, j] = p[r, j] * inv
        lse = np.log(total)
        logp_t = (np.float64(x[r, t[r]]) - m) - lse
        out = -(1.0 - eps) * logp_t
        if eps > 0:
            out -= eps / (V - 1) * ((z_sum - V * lse) - logp_t)
        loss[r] = out


@_jit
def cross_entropy_backward(p, t, w, off, hit, d):
    r"""d = (p - q) w per row: q_j = off off the target, off + hit at it; a row with w = 0 is
    exactly 0 (an ignored row: selected, so that a NaN p cannot leak). p, d: (N, V); t, w: (N,)."""
    N, V = p.shape
    for r in prange(N):
        wr = w[r]
        if wr == 0:
            for j in range(V):
                d[r, j] = 0.0
            continue
        for j in range(V):
            d[r, j] = (p[r, j] - off) * wr
        d[r, t[r]] = ((p[r, t[r]] - off) - hit) * wr


# ---------------------------------------------------------------------------
# The graph bias: a lookup per (molecule, query) row, and its sums per part
# ---------------------------------------------------------------------------
@_jit
def graph_bias_forward(relations, table, bias):
    """bias[b, h, i, j] = table[h, relations[b, i, j]]. relations: (B, T, T) integers; table: (H, R);
    bias: (B, H, T, T). One (molecule, query) row per iteration."""
    B, T = relations.shape[0], relations.shape[1]
    H = table.shape[0]
    for row in prange(B * T):
        b, i = row // T, row % T
        for h in range(H):
            for j in range(T):
                bias[b, h, i, j] = table[h, relations[b, i, j]]


@_jit
def graph_bias_backward(relations, dbias, parts):
    """parts[p, h, r]: the sum of dbias[b, h, i, j] over the (b, i, j) of part p with relations[b, i, j] = r,
    part p = (molecule, query) rows p*256 .. p*256+255 (ROWS_PER_PART). relations: (B, T, T); dbias:
    (B, H, T, T); parts: (P, H, R) float64."""
    B, T = relations.shape[0], relations.shape[1]
    H, R = parts.shape[1], parts.shape[2]
    for p in prange(parts.shape[0]):
        for h in range(H):
            for r in range(R):
                parts[p, h, r] = 0.0
        for row in range(p * ROWS_PER_PART, min(B * T, (p + 1) * ROWS_PER_PART)):
            b, i = row // T, row % T
            for j in range(T):
                r = relations[b, i, j]
                for h in range(H):
                    parts[p, h, r] += dbias[b, h, i, j]
