r"""Attention of one new query over a KV cache, as one compiled pass through memory.

A decoding step attends from one new query per (sequence, head) pair to every
key and value cached so far: :math:`S = s\,q K^\top`, :math:`P = \mathrm{softmax}(S)`,
:math:`o = P V`, with :math:`q` a single row. The work is small (two
matrix-vector products a pair) and the cache is large, so the cost is reading it:
at the tomczak model's 64 sequences x 4 heads x 64 keys x 64 wide, 8.4 MB of keys
and values a layer, every step, from memory rather than the CPU cache.

The NumPy twin (:func:`minitransformer.fast.attention.attention_forward`) calls
BLAS twice per pair, 512 small calls a layer, whose fixed cost dominates short
caches. This loop makes one pass instead, reading the keys, then the values, in
the order they lie in memory: the cache (:class:`minitransformer.nn.kv_cache.KVCache`)
is **time-major**, (T, B, H, d), so the keys of all pairs at one position are
adjacent and the filled positions are one contiguous block. Read pair by pair, a
(B, H, capacity, d) cache gives each pair a short stream of its own, which the
CPU's prefetcher must find anew: on 2 cores (``benchmarks/decode_attention.py``,
``benchmarks/RESULTS.md``) the same 8.4 MB of keys and values took
903 us that way with room for 101 positions and 570 us with room for 65, where
one pair's keys run straight into the next's.

Per pair the math is the reference's: the logits in the arrays' dtype, the masked
softmax in float64 (:func:`minitransformer.fast.fused_attention.softmax_row`:
a row that may see no key is zeros, a NaN or :math:`+\infty` logit makes it NaN),
then the weighted sum of the values. Results agree with the reference to
rounding (the sums are regrouped to vectorise: ``tests/fast/test_fast_decode_attention.py``).

Used by the fast twin when Numba runs and the call looks like a decoding step:
one query row a pair (:data:`MAX_QUERIES`), keys and values that are time-major
views (what the cache returns; also any contiguous arrays where the two layouts
coincide, one key or one pair, such as a forward of one token), no additive bias
and no dropout. Anything else (a prompt of several tokens, training) goes the
twin's way, and so does every backward (through the cache this returns). One query
row, not a few: the loops without a row axis ran 1.07-1.18x faster. The logits are
scaled after the product, as in the reference (the twin scales the queries).

It runs on the calling thread: on Numba's threads, or cut in two for the library's
pool, it was slower on 2 cores (0.26-0.8x), where two threads read memory no faster
than one and a launch costs 60-100 us (``benchmarks/RESULTS.md``).
"""
from __future__ import annotations

import numpy as np

from minitransformer.fast.engine import compiled
from minitransformer.fast.engine.compiled import numba

MAX_QUERIES = 1  # query rows per pair: a decoding step's one; a prompt goes the twin's way


def time_major(a):
    """``a`` (B, H, T, d) as the (T, B*H, d) C-contiguous array it is a view of, or None."""
    t = a.transpose(2, 0, 1, 3)  # (T, B, H, d)
    if not t.flags.c_contiguous:
        return None
    return t.reshape(t.shape[0], t.shape[1] * t.shape[2], t.shape[3])  # (T, B*H, d), a view


def usable(q, k, v, mask, bias, dropout_mask) -> bool:
    """True when this loop can take the call (module notes): Numba runs on this thread
    (:func:`minitransformer.fast.engine.compiled.usable`), q, k, v are host float arrays of one
    dtype, q has :data:`MAX_QUERIES` row a pair and every axis non-empty, k and v
    are time-major views with q's (B, H), and there is neither a bias nor a dropout
    mask (the caller has checked the inputs: the mask is boolean)."""
    if bias is not None or dropout_mask is not None or not compiled.usable(q, k, v):
        return False
    if not q.dtype == k.dtype == v.dtype or q.shape[2] > MAX_QUERIES:
        return False
    if min(q.shape + k.shape[2:] + v.shape[3:]) == 0 or not k.shape[:2] == q.shape[:2] == v.shape[:2]:
        return False
    return time_major(k) is not None and time_major(v) is not None


def attention_forward(q, k, v, mask, scale: float):
    """The forward pass of one decoding step (:func:`usable` said yes).

    Args:
        q: (B, H, 1, Dh) queries, one a pair (any strides).
        k: (B, H, T, Dh), v: (B, H, T, Dv): time-major views (the cache's).
        mask: boolean, broadcastable to (B, H, 1, T), or None.
        scale: the logits' factor.

    Returns:
        out (B, H, 1, Dv) and p (B, H, 1, T), the probabilities.
    """
    B, H, Tq, Dh = q.shape
    T, Dv = k.shape[2], v.shape[3]
    qc = np.ascontiguousarray(q).reshape(B * H, Dh)  # (B*H, Dh), Tq = 1
    # (B, H, Tq, T), a view; its rows must be unit-strided (a mask of None as T Trues, not one
    # broadcast True): with stride 0 the softmax's loops did not vectorise, 3x slower at T = 64
    allowed = np.broadcast_to(np.ones(T, dtype=bool) if mask is None else mask, (B, H, Tq, T))
    p = np.empty((B * H, T), dtype=q.dtype)  # (B*H, T)
    out = np.empty((B * H, Dv), dtype=q.dtype)  # (B*H, Dv)
    zero, scale = q.dtype.type(0), q.dtype.type(scale)  # in the arrays' dtype
    _decode_pairs(qc, time_major(k), time_major(v), allowed, zero, scale, H, p, out)
    return out.reshape(B, H, Tq, Dv), p.reshape(B, H, Tq, T)


if compiled.AVAILABLE:
    from minitransformer.fast.fused_attention import softmax_row

    _VECTORIZE = {"reassoc", "contract"}  # as compiled._jit(vectorize_sums=True)

    @numba.njit(cache=True, inline="always", fastmath=_VECTORIZE, error_model="numpy")
    def _dot(x, y, zero):
        """x . y for (d,) arrays, summed from ``zero`` (its dtype)."""
        acc = zero
        for i in range(x.shape[0]):
            acc += x[i] * y[i]
        return acc

    @numba.njit(cache=True, inline="always", fastmath=_VECTORIZE, error_model="numpy")
    def _add_scaled(a, x, y):
        """y += a x for (d,) arrays."""
        for i in range(x.shape[0]):
            y[i] += a * x[i]

    @numba.njit(cache=True, fastmath=_VECTORIZE, error_model="numpy")
    def _decode_pairs(q, k, v, allowed, zero, scale, H, p, out):
        """q (BH, Dh), one query a pair; k (T, BH, Dh), v (T, BH, Dv) time-major; allowed
        (B, H, 1, T); zero and scale in the arrays' dtype. Writes
        p (BH, T), the probabilities, and out (BH, Dv). On the calling thread (module notes)."""
        T = k.shape[0]
        for j in range(T):  # S = s q K^T, one position of every pair at a time: memory order
            kj = k[j]  # (BH, Dh)
            for bh in range(q.shape[0]):
                p[bh, j] = _dot(q[bh], kj[bh], zero) * scale
        for bh in range(q.shape[0]):  # P = softmax(S) row by row, in place
            softmax_row(p[bh], allowed[bh // H, bh % H, 0], T)
            out[bh, :] = 0.0
        for j in range(T):  # o = P V, again one position at a time
            vj = v[j]  # (BH, Dv)
            for bh in range(q.shape[0]):
                _add_scaled(p[bh, j], vj[bh], out[bh])
