"""Fast layer normalisation: the reference's math with fewer passes over memory.

Row sums are einsums (one read of the rows, no (..., D) temporary, several times
faster than ``.mean(axis=-1)`` on rows this short), and temporaries that are not
needed again are overwritten in place. The cache holds what the reference's holds,
under its own type, so that a layer sends it back through this file's backward.
With Numba, each way is one compiled loop (:mod:`minitransformer.fast.engine.compiled`); on a
GPU, fused CUDA kernels (:mod:`minitransformer.fast.engine.cuda`).
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer.backend import xp
from minitransformer.fast.engine import compiled, cuda


class FastLayerNormCache(NamedTuple):
    """What :func:`layernorm_backward` needs (the fields of the reference's ``LayerNormCache``)."""

    xhat: object  # (..., D) the normalised input
    rstd: object  # (..., 1) 1 / sqrt(var + eps) of each row
    w: object  # (D,) the gain


def layernorm_forward(x, w, b, eps: float = 1e-5):
    """As :func:`minitransformer.nn.layernorm.layernorm_forward`."""
    if x.shape[-1] != w.shape[0]:
        raise ValueError(f"layernorm: input has last dimension {x.shape[-1]}, expected {w.shape[0]}")
    D = x.shape[-1]
    if cuda.usable(x, w, b) and w.shape == b.shape == (D,):  # a GPU: one fused launch, a warp per row
        x2 = xp.ascontiguousarray(x).reshape(-1, D)  # (N, D)
        y, xhat, rstd = cuda.layernorm_forward(x2, xp.ascontiguousarray(w), xp.ascontiguousarray(b), float(eps))
        return y.reshape(x.shape), FastLayerNormCache(xhat.reshape(x.shape), rstd.reshape(*x.shape[:-1], 1), w)
    if compiled.usable(x, w, b) and x.dtype == w.dtype == b.dtype:  # one compiled pass per row
        x2 = xp.ascontiguousarray(x).reshape(-1, D)  # (N, D)
        y, xhat = xp.empty_like(x2), xp.empty_like(x2)  # (N, D) each
        rstd = xp.empty(x2.shape[0], dtype=x.dtype)  # (N,)
        compiled.layernorm_forward(x2, w, b, float(eps), y, xhat, rstd)  # rows spread over the cores (if many)
        return y.reshape(x.shape), FastLayerNormCache(xhat.reshape(x.shape), rstd.reshape(*x.shape[:-1], 1), w)
    # Row sums as einsums: one read of the rows, no (..., D) temporary, and several
    # times faster than .mean(axis=-1) / (a * b).mean(axis=-1) on rows this short.
    mu = xp.einsum("...d->...", x)[..., None] / D  # (..., 1)
    xc = x - mu  # (..., D)
    var = xp.einsum("...d,...d->...", xc, xc)[..., None] / D  # (..., 1), biased: divide by D
    rstd = 1.0 / xp.sqrt(var + eps)  # (..., 1)
    xhat = xc  # (..., D), in place: x - mu is not needed again
    xhat *= rstd
    y = xhat * w  # (..., D)
    y += b
    return y, FastLayerNormCache(xhat, rstd, w)


def layernorm_backward(dy, cache: FastLayerNormCache):
    """As :func:`minitransformer.nn.layernorm.layernorm_backward`."""
    xhat, rstd, w = cache
    D = xhat.shape[-1]
    if cuda.usable(dy, xhat, rstd, w) and dy.shape == xhat.shape and rstd.size * D == xhat.size:  # a GPU
        dx, dw, db = cuda.layernorm_backward(xp.ascontiguousarray(dy).reshape(-1, D),
                                             xp.ascontiguousarray(xhat).reshape(-1, D),
                                             xp.ascontiguousarray(rstd).reshape(-1), xp.ascontiguousarray(w))
        return dx.reshape(dy.shape), dw, db
    if compiled.usable(dy, xhat, rstd, w) and dy.dtype == xhat.dtype == rstd.dtype == w.dtype \
            and dy.shape == xhat.shape:  # one compiled pass per row, partial gradients per 256 rows
        dy2 = xp.ascontiguousarray(dy).reshape(-1, D)  # (N, D)
        xhat2 = xp.ascontiguousarray(xhat).reshape(-1, D)  # (N, D), in the forward pass the normalised input
        dx = xp.empty_like(dy2)  # (N, D)
        P = compiled.parts(dy2.shape[0])
        dw_parts, db_parts = xp.empty((P, D), dtype=xp.float64), xp.empty((P, D), dtype=xp.float64)  # (P, D) each
        rstd1 = xp.ascontiguousarray(rstd).reshape(-1)  # (N,)
        compiled.layernorm_backward(dy2, xhat2, rstd1, w, dx, dw_parts, db_parts)  # parts spread over the cores
        return dx.reshape(dy.shape), dw_parts.sum(axis=0).astype(w.dtype), db_parts.sum(axis=0).astype(w.dtype)
    dy2 = dy.reshape(-1, D)  # (N, D)
    xhat2 = xhat.reshape(-1, D)  # (N, D), in the forward pass this was the normalised input
    dw = xp.einsum("nd,nd->d", dy2, xhat2)  # (D,), sum over rows of dy * xhat
    db = xp.einsum("nd->d", dy2)  # (D,), sum over rows of dy
    g = dy * w  # (..., D), gradient w.r.t. xhat
    g_mean = xp.einsum("...d->...", g)[..., None] / D  # (..., 1)
    gx_mean = xp.einsum("...d,...d->...", g, xhat)[..., None] / D  # (..., 1)
    dx = g  # (..., D), in place: g is not needed again
    dx -= g_mean
    dx -= xhat * gx_mean
    dx *= rstd
    return dx, dw, db
