r"""Attention as one compiled loop over (sequence, head) pairs that calls BLAS itself.

The math is that of :mod:`minitransformer.nn.attention` (and of the NumPy fast
twin, :mod:`minitransformer.fast.attention`, which calls this module when it is
switched on and can run). For each pair (b, h), on Numba's threads, with BLAS on
one thread per pair:

forward
    :math:`S = s\,Q K^\top` (one ``gemm``, the scale :math:`s` as its
    :math:`\alpha`), the masked softmax row by row in place (:math:`P`), dropout
    (:math:`P_d = P \odot M`), :math:`O = P_d V` (one ``gemm``).
backward
    :math:`dV = P_d^\top dO`, :math:`dP = dO\,V^\top`, then per row
    :math:`dS_{ij} = P_{ij}(dP_{ij} M_{ij} - \delta_i)` with
    :math:`\delta_i = dO_i \cdot O_i` (see the twin's notes), and
    :math:`dQ = s\,dS\,K`, :math:`dK = s\,dS^\top Q`.

Every matrix is read and written in place through its leading dimension
(:func:`minitransformer.fast.engine.blas.gemm`, which finds the library): Q, K and V are the strided (B, H, T, d) views
of the fused projection, the output and dQ, dK, dV are token-major views. While a
pair's (T, T) block is worked on it stays in the core's cache: the products, the
softmax and the dropout each touch it there, instead of one pass over all
(B, H, T, T) scores per NumPy operation. What is kept for the backward is the
same as the twin's (:math:`P`, :math:`P_d`, :math:`O`). Recomputing :math:`P` in
the backward instead (flash-style) would repeat the logits' product, the mask and
the softmax, most of this forward (1.58 / 2.50 / 5.68 ms at the small, tomczak and
medium shapes; 82-97 % of a plain NumPy forward there), to save writing and reading
:math:`P` once: 0.34 ms for the 4.2 MB of the small and tomczak scores, 2.1 ms for
medium's 16.8 MB (``benchmarks/RESULTS.md``). So it keeps them.

**On where the compiled loops run on one pool of two threads or more** (OpenMP's:
:func:`minitransformer.fast.engine.blas.on_pool`), as do the linear layer's products, so that
a step's every kernel runs on threads that are awake; off otherwise (on one thread, inside whole
training steps, it ran at 1.05 / 0.92 / 1.03x the twin's speed, small / tomczak / medium, medians
of 3 rounds, best steps 1.15 / 0.99 / 0.96x: no clear gain, ``benchmarks/RESULTS.md``).
``MINITRANSFORMER_BLAS_ATTENTION=1``
or ``0`` at start (or :func:`set_enabled`) turns it on or off whatever the pool. With Numba's work
queue and NumPy's products around it, at the three benchmark models' shapes, forward and
backward together ran 1.12-1.22x faster than the twin's NumPy products alone, but 0.95-1.00x
inside whole training steps (medians of 8 rounds; best steps 0.93-1.05x; ``benchmarks/RESULTS.md``):
the products, one small ``gemm`` per pair and block, take most of its time, as they do the twin's.

The query axis may be cut into blocks that see only a prefix of the keys (the
twin's :func:`~minitransformer.fast.attention.query_blocks`); their other
probabilities are exact zeros.

**The exponential** is :func:`minitransformer.fast.engine.elementary.exp_nonpositive` for float64
logits and :func:`~minitransformer.fast.engine.elementary.exp32_nonpositive` for float32 ones (as the
twin's compiled softmax), written out so that the row loop vectorises (NumPy's ``exp`` cannot be
called per row from a compiled loop without losing that); their error bounds are documented there.
A row's sum runs in float64 whatever the dtype.

Bad values: a row with a NaN or :math:`+\infty` score among the keys it may see
is all NaN, and a row that may see no key is all zeros, as in the reference.
"""
from __future__ import annotations

import os

import numpy as np

from minitransformer.fast.engine import blas, compiled
from minitransformer.fast.engine.compiled import numba, prange
from minitransformer.fast.engine.elementary import exp32_nonpositive, exp_nonpositive

_SETTINGS = {"1": True, "0": False}
_enabled = {"on": _SETTINGS.get(os.environ.get("MINITRANSFORMER_BLAS_ATTENTION", "").strip())}


def set_enabled(on: bool | None) -> None:
    """Use this compiled loop where it can run (True; ``MINITRANSFORMER_BLAS_ATTENTION=1`` at
    start), the twin's NumPy products (False; ``=0``), or the default: the loop where the
    compiled loops run on one pool of threads (None; module notes)."""
    _enabled["on"] = None if on is None else bool(on)


def enabled() -> bool:
    """Whether the loop is switched on (:func:`set_enabled`; by default, whether there is one pool)."""
    if _enabled["on"] is None:  # the default: where the linear layer's products run on the pool too
        return blas.on_pool()
    return _enabled["on"]


def usable(q, k, v, mask, bias, scale: float) -> bool:
    """True when the compiled loop can take this call: it is switched on, Numba and an
    ILP64 OpenBLAS are there (:func:`minitransformer.fast.engine.blas.available`), this is the
    main thread (:func:`minitransformer.fast.engine.compiled.usable`), the arrays are host float32
    or float64 arrays of one dtype with every axis non-empty, there is no additive bias
    (its gradient is summed over the batch: the twin does that), and the scale is not 0
    (BLAS skips a product whose alpha is 0, so a NaN in q or k would not reach the output)."""
    if bias is not None or scale == 0 or not compiled.usable(q, k, v) or not enabled() or not blas.available():
        return False
    return q.dtype == k.dtype == v.dtype and min(q.shape + k.shape[2:] + v.shape[3:]) > 0


def backward_usable(p) -> bool:
    """True when the loop can run the backward of a cache it made: the forward's
    conditions that can change since (the main thread, Numba on); else the twin runs it."""
    return compiled.usable(p) and blas.available()


def _gemm_ready(a):
    """``a``, or a contiguous copy where BLAS could not read its (rows, cols) matrices in
    place: their elements must be adjacent along a row, and rows a whole number of
    elements apart, in increasing order, never overlapping."""
    its = a.itemsize
    rows, cols = a.shape[-2:]
    row, col = a.strides[-2:]
    whole = a.dtype.isnative and a.flags.aligned and all(s % its == 0 for s in a.strides)  # every axis
    if whole and (col == its or cols == 1) and (rows == 1 or (row > 0 and row // its >= cols)):
        return a
    return np.ascontiguousarray(a)


def _allowed(mask, Tk: int):
    """The mask as a contiguous (Mb, Mh, Mq, Tk) boolean array whose first three axes are
    1 or the full size (all True without a mask): read per pair and row in the loop."""
    if mask is None:
        return np.ones((1, 1, 1, Tk), dtype=bool)
    m = np.asarray(mask, dtype=bool)
    m = m.reshape((1,) * (4 - m.ndim) + m.shape)  # (Mb, Mh, Mq, Mk)
    return np.ascontiguousarray(np.broadcast_to(m, m.shape[:3] + (Tk,)))  # (Mb, Mh, Mq, Tk)


def _drop(dropout_mask, q, shape):
    """(dropout mask as a contiguous ``shape`` (B, H, Tq, Tk) array, whether there is one):
    the loop reads it per pair and row."""
    if dropout_mask is None:
        return np.ones((1, 1, 1, 1), dtype=q.dtype), False
    return np.ascontiguousarray(np.broadcast_to(dropout_mask, shape), dtype=q.dtype), True


def _matrices(*arrays):
    """(addresses (n,), strides in elements (n, 4)) of (B, H, T, d) arrays: how the loop
    finds matrix (b, h) of each, and BLAS its rows. Passed as numbers, not arrays, so that
    one compiled loop serves every memory layout (Numba compiles one per layout)."""
    addresses = np.array([a.__array_interface__["data"][0] for a in arrays], dtype=np.int64)  # (n,)
    strides = np.array([[s // a.itemsize for s in a.strides] for a in arrays], dtype=np.int64)  # (n, 4)
    return addresses, strides


def _zero_unseen(blocks, a) -> None:
    """The rows of ``a`` (out or dq) in blocks that see no key are zeros: the loop skips them."""
    for q0, q1, k_end in blocks:
        if k_end == 0:
            a[:, :, q0:q1] = 0.0


def attention_forward(q, k, v, mask, scale: float, dropout_mask, blocks):
    """The forward pass for :func:`minitransformer.fast.attention.attention_forward`.

    Args:
        q: (B, H, Tq, Dh); k: (B, H, Tk, Dh); v: (B, H, Tk, Dv), one dtype.
        mask: boolean, broadcastable to (B, H, Tq, Tk), True = may attend; or None.
        scale: the logits' scale s. dropout_mask: (B, H, Tq, Tk) or None.
        blocks: ``[(q0, q1, k_end)]``: rows q0..q1-1 see keys 0..k_end-1 at most.

    Returns:
        (q, k, v as read, out (B, H, Tq, Dv) token-major, p, pd (B, H, Tq, Tk)).
    """
    q, k, v = _gemm_ready(q), _gemm_ready(k), _gemm_ready(v)
    B, H, Tq, Dh = q.shape
    Tk, Dv = k.shape[2], v.shape[3]
    drop, has_drop = _drop(dropout_mask, q, (B, H, Tq, Tk))
    p = np.empty((B, H, Tq, Tk), dtype=q.dtype)  # (B, H, Tq, Tk)
    pd = np.empty_like(p) if has_drop else p  # (B, H, Tq, Tk)
    out = np.empty((B, Tq, H, Dv), dtype=q.dtype).transpose(0, 2, 1, 3)  # (B, H, Tq, Dv), heads side by side
    at, st = _matrices(q, k, v, out)
    sizes = np.array([B, H, Tq, Tk, Dh, Dv], dtype=np.int64)
    with blas.one_thread():
        _forward_pairs(p, pd, at, st, sizes, q.dtype == np.float32, float(scale), _allowed(mask, Tk), drop,
                       has_drop, np.asarray(blocks, dtype=np.int64).reshape(-1, 3))
    _zero_unseen(blocks, out)
    return q, k, v, out, p, pd


def attention_backward(dout, q, k, v, p, pd, out, dropout_mask, scale: float, blocks, dq, dk, dv):
    """The backward pass for :func:`minitransformer.fast.attention.attention_backward`:
    writes dq (B, H, Tq, Dh), dk, dv (B, H, Tk, d) (views BLAS can write in place).
    The other arguments are the forward's, as :func:`attention_forward` returned them."""
    dout = _gemm_ready(np.asarray(dout, dtype=q.dtype))  # the cache's dtype: the loop reads both as one
    B, H, Tq, Dh = q.shape
    Tk, Dv = k.shape[2], v.shape[3]
    drop, has_drop = _drop(dropout_mask, q, (B, H, Tq, Tk))
    delta = np.einsum("bhqd,bhqd->bhq", dout, out)  # (B, H, Tq) = rowsum(dP * P_d), as the twin forms it
    at, st = _matrices(q, k, v, dout, dq, dk, dv)
    sizes = np.array([B, H, Tq, Tk, Dh, Dv], dtype=np.int64)
    if len(blocks) > 1:  # each block of rows adds its share to the keys it saw
        dk[...] = 0.0
        dv[...] = 0.0
    with blas.one_thread():
        _backward_pairs(p, pd, delta, at, st, sizes, q.dtype == np.float32, float(scale), drop, has_drop,
                        np.asarray(blocks, dtype=np.int64).reshape(-1, 3), float(len(blocks) > 1))
    _zero_unseen(blocks, dq)


if compiled.AVAILABLE:
    gemm = blas.gemm  # inlined into the loops below (blas's notes: touch this file when it changes)

    @numba.njit(cache=True, fastmath={"reassoc", "contract"})
    def softmax_row(row, allowed, n):
        """row[:n] (the logits of one query over the keys it may reach) -> probabilities,
        in place; allowed[:n] True where the mask lets it attend."""
        top = -np.inf
        bad = 0
        for j in range(n):  # the largest allowed logit; NaN counted, not compared
            x = np.float64(row[j])
            bad += (x != x) & allowed[j]
            x = x if allowed[j] else -np.inf
            top = x if x > top else top
        if bad > 0 or top == np.inf:  # NaN in, or inf - inf: the reference's row of NaN
            for j in range(n):
                row[j] = np.nan
            return
        if top == -np.inf:  # may attend to nothing: zeros
            for j in range(n):
                row[j] = 0.0
            return
        total = 0.0
        if row.itemsize == 4:  # float32 logits: float32's exponential, the sum in float64 (as compiled's softmax)
            top32 = np.float32(top)
            for j in range(n):
                e32 = exp32_nonpositive(np.float32(row[j]) - top32) if allowed[j] else np.float32(0.0)
                row[j] = e32
                total += e32
            inv32 = np.float32(1.0) / np.float32(total)
            for j in range(n):
                row[j] = row[j] * inv32
            return
        for j in range(n):
            e = exp_nonpositive(np.float64(row[j]) - top) if allowed[j] else 0.0
            row[j] = e
            total += e
        inv = 1.0 / total
        for j in range(n):
            row[j] = row[j] * inv

    @numba.njit(cache=True, inline="always")
    def _at(at, st, its, i, b, h, row):
        """The address of row ``row`` of matrix (b, h) of array i (see _matrices); its: bytes an element."""
        return at[i] + (b * st[i, 0] + h * st[i, 1] + row * st[i, 2]) * its

    @compiled._jit(vectorize_sums=True)
    def _forward_pairs(p, pd, at, st, sizes, single, scale, allowed, drop, has_drop, blocks):
        """(p first: its size picks the build, compiled.Kernel) at, st: q, k, v, out (B, H, T, d)
        as _matrices gives them; sizes: B, H, Tq, Tk, Dh, Dv; allowed (Mb, Mh, Mq, Tk); drop
        (B, H, Tq, Tk) if has_drop; blocks (nb, 3). Writes p, pd (B, H, Tq, Tk) and out."""
        B, H, Tq, Tk, Dh, Dv = sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5]
        Mb, Mh, Mq = allowed.shape[0], allowed.shape[1], allowed.shape[2]
        its = p.itemsize
        ld_q, ld_k, ld_v, ld_o = max(st[0, 2], Dh), max(st[1, 2], Dh), max(st[2, 2], Dv), max(st[3, 2], Dv)
        for pair in prange(B * H):
            b, h = pair // H, pair % H
            pb, pdb = p[b, h], pd[b, h]  # (Tq, Tk) each, contiguous
            mb = allowed[b if Mb > 1 else 0, h if Mh > 1 else 0]  # (Mq, Tk)
            for block in range(blocks.shape[0]):
                q0, q1, k_end = blocks[block, 0], blocks[block, 1], blocks[block, 2]
                for i in range(q0, q1):  # the keys no row of the block sees: probability 0
                    for j in range(k_end, Tk):
                        pb[i, j] = 0.0
                        pdb[i, j] = 0.0
                if k_end == 0:  # no key to see: the output rows are zeros (_zero_unseen)
                    continue
                # S = s Q K^T, (q1 - q0, k_end), into p's rows
                gemm(single, False, True, q1 - q0, k_end, Dh, scale, _at(at, st, its, 0, b, h, q0), ld_q,
                     _at(at, st, its, 1, b, h, 0), ld_k, 0.0, pb[q0:].ctypes.data, Tk)
                for i in range(q0, q1):
                    softmax_row(pb[i], mb[i if Mq > 1 else 0], k_end)
                    if has_drop:
                        for j in range(k_end):
                            pdb[i, j] = pb[i, j] * drop[b, h, i, j]
                # O = P_d V, (q1 - q0, Dv)
                gemm(single, False, False, q1 - q0, Dv, k_end, 1.0, pdb[q0:].ctypes.data, Tk,
                     _at(at, st, its, 2, b, h, 0), ld_v, 0.0, _at(at, st, its, 3, b, h, q0), ld_o)

    @compiled._jit(vectorize_sums=True)
    def _backward_pairs(p, pd, delta, at, st, sizes, single, scale, drop, has_drop, blocks, adding):
        """at, st: q, k, v, dout, dq, dk, dv; delta (B, H, Tq) = dO . O; adding: 1 to add to dk
        and dv (zeroed first: several blocks), 0 to write them; the rest as the forward's.
        Writes dq (the rows no block sees: _zero_unseen), dk, dv."""
        B, H, Tq, Tk, Dh, Dv = sizes[0], sizes[1], sizes[2], sizes[3], sizes[4], sizes[5]
        ld_q, ld_k, ld_v, ld_g = max(st[0, 2], Dh), max(st[1, 2], Dh), max(st[2, 2], Dv), max(st[3, 2], Dv)
        ld_dq, ld_dk, ld_dv = max(st[4, 2], Dh), max(st[5, 2], Dh), max(st[6, 2], Dv)
        its = p.itemsize
        for pair in prange(B * H):
            b, h = pair // H, pair % H
            pb, pdb = p[b, h], pd[b, h]
            ds = np.empty((Tq, Tk), dtype=p.dtype)  # (Tq, Tk) dP, then dS, of this pair
            for block in range(blocks.shape[0]):
                q0, q1, k_end = blocks[block, 0], blocks[block, 1], blocks[block, 2]
                rows = q1 - q0
                if k_end == 0:  # rows that saw no key: no gradient reaches q (_zero_unseen)
                    continue
                g = _at(at, st, its, 3, b, h, q0)  # dO's rows of the block
                # dV[:k_end] (+)= P_d^T dO
                gemm(single, True, False, k_end, Dv, rows, 1.0, pdb[q0:].ctypes.data, Tk, g, ld_g, adding,
                     _at(at, st, its, 6, b, h, 0), ld_dv)
                # dP = dO V^T, (rows, k_end)
                gemm(single, False, True, rows, k_end, Dv, 1.0, g, ld_g, _at(at, st, its, 2, b, h, 0), ld_v, 0.0,
                     ds[q0:].ctypes.data, Tk)
                for i in range(q0, q1):
                    di = delta[b, h, i]
                    if has_drop:
                        for j in range(k_end):
                            ds[i, j] = pb[i, j] * (ds[i, j] * drop[b, h, i, j] - di)
                    else:
                        for j in range(k_end):
                            ds[i, j] = pb[i, j] * (ds[i, j] - di)
                # dQ = s dS K; dK[:k_end] (+)= s dS^T Q
                gemm(single, False, False, rows, Dh, k_end, scale, ds[q0:].ctypes.data, Tk,
                     _at(at, st, its, 1, b, h, 0), ld_k, 0.0, _at(at, st, its, 4, b, h, q0), ld_dq)
                gemm(single, True, False, k_end, Dh, rows, scale, ds[q0:].ctypes.data, Tk,
                     _at(at, st, its, 0, b, h, q0), ld_q, adding, _at(at, st, its, 5, b, h, 0), ld_dk)
