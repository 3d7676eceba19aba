r"""Attention as one compiled loop over (sequence, head) pairs: the products through BLAS from
inside the loop, the mask and the softmax between them (optional: Numba, float32 on the CPU).

:mod:`minitransformer.fast.attention` runs attention as about a dozen NumPy operations on
blocks of sequences; each is a pass over a (b, H, Tq, Tk) array and a trip through Python.
Here each (b, h) pair is one iteration of a ``prange`` loop that

1. copies its keys and values (strided views of the fused projection) into small contiguous
   buffers, and writes its scaled queries :math:`sQ` into the cache,
2. forms the logits :math:`S = (sQ)K^\top` straight into the probabilities' memory with
   ``np.dot`` (which Numba hands to SciPy's BLAS ``sgemm``: no Python in between),
3. takes the softmax row by row, the mask applied on the way (masked keys get exactly 0, a
   row with no key to see is all zeros, as in the reference),
4. multiplies :math:`P V` and writes the rows into the token-major output buffer.

The backward is the same walk: :math:`dP = dO\,V^\top`, the row term
:math:`\delta_i = dO_i \cdot O_i`, :math:`dS = P \odot (dP - \delta)`,
:math:`dQ = s\,dS\,K`, :math:`dK = dS^\top (sQ)`, :math:`dV = P^\top dO`.

**The exponential.** Numba's ``exp`` is a call into the C library per element (this CPU has
no SVML), about ten times slower than NumPy's vectorised one. :func:`_exp_row` computes
:math:`e^x` for :math:`x \le 0` as :math:`2^n e^r` with :math:`n = \mathrm{round}(x \log_2 e)`,
:math:`r = x - n \ln 2 \in [-\tfrac12\ln 2, \tfrac12\ln 2]` and :math:`e^r` by its Taylor
polynomial of degree 7, in float64: plain arithmetic that the compiler vectorises.
**Bound:** the Taylor remainder gives a relative error below :math:`e^{2|r|}|r|^8/8! \le 1.1\cdot10^{-8}`, far
under float32's rounding (:math:`6\cdot10^{-8}`), so each probability is within 2 units in the
last place of float32 of the exact softmax of the float32 logits; below :math:`x = -708`
(where float64's :math:`2^n` ends) the value is taken at :math:`x = -708`, about
:math:`3\cdot10^{-308}`, which rounds to 0 in float32 as the true value does.
``tests/fast/test_fast_compiled_attention.py`` checks the exponential at that bound and the
kernels against the reference.

Float32 only (a float64 gradient check needs float64's last digits, which the reference
path gives), and only without an additive bias or dropout; :func:`usable` says when.
"""
from __future__ import annotations

import numpy as np

from minitransformer.fast import compiled
from minitransformer.fast.compiled import _jit, numba, prange

_LOG2E = 1.4426950408889634
_LN2 = 0.6931471805599453
_X_MIN = -708.0  # below this 2^n is no longer a normal float64


def _exp_row(x, r, n_bits, two_n, out):
    r"""out[j] = e^{x[j]} for x[j] <= 0 (float64 scratch r, two_n and int64 n_bits, all (Tk,))."""
    Tk = x.shape[0]
    for j in range(Tk):  # round to the nearest power of two, keep the remainder
        v = max(x[j], _X_MIN)
        n = np.rint(v * _LOG2E)
        r[j] = v - n * _LN2
        n_bits[j] = (np.int64(n) + 1023) << 52  # the bits of the float64 2^n
    for j in range(Tk):
        q = r[j]  # e^q by Horner, degree 7
        poly = 1.0 + q * (1.0 + q * (0.5 + q * (1.0 / 6.0 + q * (1.0 / 24.0 + q * (
            1.0 / 120.0 + q * (1.0 / 720.0 + q * (1.0 / 5040.0)))))))
        out[j] = poly * two_n[j]


if numba is not None:  # called from inside the loops below: a plain compiled function
    _exp_row = numba.njit(cache=True)(_exp_row)


def exp_nonpositive(x: np.ndarray) -> np.ndarray:
    """:math:`e^x` of a 1-D array of x <= 0 by :func:`_exp_row` (float64), for tests and plots."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    n_bits = np.empty(x.shape, np.int64)
    out = np.empty(x.shape, np.float64)
    _exp_row(x, np.empty(x.shape), n_bits, n_bits.view(np.float64), out)
    return out


@_jit
def attention_forward(q, k, v, allowed, scale, qs, p, out):
    r"""q, k: (B, H, Tq|Tk, Dh); v: (B, H, Tk, Dv); allowed: (B, H, Tq, Tk) bool (broadcast views
    welcome); writes qs = s q (B, H, Tq, Dh), p (B, H, Tq, Tk) and out (B, H, Tq, Dv)."""
    B, H, Tq, Dh = q.shape
    Tk, Dv = k.shape[2], v.shape[3]
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        kc = np.empty((Tk, Dh), np.float32)  # this pair's keys, contiguous
        vc = np.empty((Tk, Dv), np.float32)
        for j in range(Tk):
            for d in range(Dh):
                kc[j, d] = k[b, h, j, d]
            for d in range(Dv):
                vc[j, d] = v[b, h, j, d]
        for i in range(Tq):
            for d in range(Dh):
                qs[b, h, i, d] = q[b, h, i, d] * scale
        pb = p[b, h]  # (Tq, Tk), contiguous
        np.dot(qs[b, h], kc.T, pb)  # the logits, in p's memory
        x = np.empty(Tk, np.float64)
        r = np.empty(Tk, np.float64)
        n_bits = np.empty(Tk, np.int64)
        e = np.empty(Tk, np.float64)
        for i in range(Tq):
            m = -np.inf
            for j in range(Tk):
                if allowed[b, h, i, j] and pb[i, j] > m:
                    m = pb[i, j]
            if m == -np.inf:  # no key to see (or every logit -inf): a row of zeros
                for j in range(Tk):
                    pb[i, j] = 0.0
                continue
            for j in range(Tk):
                x[j] = pb[i, j] - m
            _exp_row(x, r, n_bits, n_bits.view(np.float64), e)
            total = 0.0
            for j in range(Tk):
                if allowed[b, h, i, j]:
                    total += e[j]
                else:
                    e[j] = 0.0  # masked: exactly 0
            inv = 1.0 / total
            for j in range(Tk):
                pb[i, j] = e[j] * inv
        o = np.dot(pb, vc)  # (Tq, Dv)
        for i in range(Tq):
            for d in range(Dv):
                out[b, h, i, d] = o[i, d]


@_jit
def attention_backward(dout, qs, k, v, p, o, scale, dq, dk, dv):
    r"""dout, o: (B, H, Tq, Dv); qs (scaled queries), k: (B, H, T, Dh); p: (B, H, Tq, Tk); writes
    dq (B, H, Tq, Dh), dk (B, H, Tk, Dh), dv (B, H, Tk, Dv) (any strides)."""
    B, H, Tq, Dh = qs.shape
    Tk, Dv = k.shape[2], v.shape[3]
    for bh in prange(B * H):
        b, h = bh // H, bh % H
        kc = np.empty((Tk, Dh), np.float32)
        vc = np.empty((Tk, Dv), np.float32)
        for j in range(Tk):
            for d in range(Dh):
                kc[j, d] = k[b, h, j, d]
            for d in range(Dv):
                vc[j, d] = v[b, h, j, d]
        doc = np.empty((Tq, Dv), np.float32)
        delta = np.empty(Tq, np.float32)
        for i in range(Tq):
            acc = 0.0
            for d in range(Dv):
                g = dout[b, h, i, d]
                doc[i, d] = g
                acc += g * o[b, h, i, d]
            delta[i] = acc  # dO_i . O_i = sum_j dP_ij P_ij
        pb = p[b, h]  # (Tq, Tk)
        ds = np.dot(doc, vc.T)  # (Tq, Tk) dP, then dS in place
        for i in range(Tq):
            for j in range(Tk):
                ds[i, j] = pb[i, j] * (ds[i, j] - delta[i])
        g = np.dot(ds, kc)  # (Tq, Dh)
        for i in range(Tq):
            for d in range(Dh):
                dq[b, h, i, d] = g[i, d] * scale
        g = np.dot(ds.T, qs[b, h])  # (Tk, Dh)
        for j in range(Tk):
            for d in range(Dh):
                dk[b, h, j, d] = g[j, d]
        g = np.dot(pb.T, doc)  # (Tk, Dv)
        for j in range(Tk):
            for d in range(Dv):
                dv[b, h, j, d] = g[j, d]


def usable(q, k, v, mask, bias, dropout_mask) -> bool:
    """True when the compiled attention can take these inputs: Numba on (:func:`compiled.usable`),
    float32 throughout, a boolean mask or none, no bias, no dropout, at least one key."""
    if bias is not None or dropout_mask is not None or k.shape[2] == 0:
        return False
    if not compiled.usable(q, k, v) or not (q.dtype == k.dtype == v.dtype == np.float32):
        return False
    return mask is None or (type(mask) is np.ndarray and mask.dtype == np.bool_)


def usable_backward(*arrays) -> bool:
    """True when :func:`attention_backward` can take these arrays (the cache of a compiled forward
    or of one without bias, dropout or skipped keys): Numba on, float32 throughout."""
    return compiled.usable(*arrays) and all(a.dtype == np.float32 for a in arrays)
