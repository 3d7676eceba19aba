"""Fast linear: the reference's ``y = x W + b`` with the bias added in place, and
the bias gradient summed by BLAS. Where the compiled loops run on one pool of two
threads or more (:func:`minitransformer.fast.engine.blas.on_pool`), the three products are
compiled loops on those threads, one ``gemm`` per share of rows
(:mod:`minitransformer.fast.engine.blas`); otherwise NumPy's.

``y = y + b`` (the reference) makes a second (N, D_out) array and reads and
writes the output once more; ``y += b`` reuses the product's memory. Same
numbers; the cache holds what the reference's holds, under its own type, so
that a layer sends it back through this file's backward (the set that made it).
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer.backend import check_linear_inputs, xp
from minitransformer.fast.engine import blas


class FastLinearCache(NamedTuple):
    """What :func:`linear_backward` needs (the fields of the reference's ``LinearCache``)."""

    x: object  # (..., D_in) the input: dW = x^T dy
    W: object  # (D_in, D_out) the weight: dx = dy W^T
    has_bias: bool  # whether there is a db to return


def linear_forward(x, W, b=None):
    """As :func:`minitransformer.nn.linear.linear_forward`."""
    check_linear_inputs(x, W)
    if blas.usable(x, W, *(() if b is None else (b,))):  # on the compiled loops' threads, bias added there
        y = blas.linear_product(xp.ascontiguousarray(x).reshape(-1, W.shape[0]), xp.ascontiguousarray(W), b)
        return y.reshape(*x.shape[:-1], W.shape[1]), FastLinearCache(x, W, b is not None)  # (..., D_out)
    y = x.reshape(-1, W.shape[0]) @ W  # (N, D_out), one 2-D product over all rows
    if b is not None:
        y += b  # (N, D_out), in place
    return y.reshape(*x.shape[:-1], W.shape[1]), FastLinearCache(x, W, b is not None)  # (..., D_out)


def linear_backward(dy, cache: FastLinearCache):
    r"""As :func:`minitransformer.nn.linear.linear_backward` (dx and dW are its products),
    with the bias gradient as a matrix-vector product, :math:`db = \mathbf{1}^\top dY`:
    BLAS sums the rows 2-7x faster than ``dy.sum(axis=0)`` on these shapes (the order
    of the additions differs, the sum does not beyond rounding)."""
    x, W, has_bias = cache
    if blas.usable(dy, x, W):  # on the compiled loops' threads
        dx, dW, db = blas.linear_gradients(xp.ascontiguousarray(dy).reshape(-1, W.shape[1]),
                                           xp.ascontiguousarray(x).reshape(-1, W.shape[0]),
                                           xp.ascontiguousarray(W), has_bias)
        return dx.reshape(x.shape), dW, db
    dy2 = dy.reshape(-1, W.shape[1])  # (N, D_out)
    dx = (dy2 @ W.T).reshape(x.shape)  # (..., D_in)
    dW = x.reshape(-1, W.shape[0]).T @ dy2  # (D_in, D_out)
    db = xp.ones(dy2.shape[0], dtype=dy2.dtype) @ dy2 if has_bias else None  # (D_out,)
    return dx, dW, db
