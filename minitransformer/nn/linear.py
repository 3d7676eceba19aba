r"""The affine map :math:`y = xW + b`, for ``x`` (..., D_in) and ``W`` (D_in, D_out),
stored input-major so the forward is a plain matmul. Backward, with the leading axes
of ``x`` and ``dy`` flattened into N rows:

.. math:: dx = dy\, W^\top, \qquad dW = x^\top dy, \qquad db = \textstyle\sum_{n} dy_n .
"""
from __future__ import annotations

import math
from typing import NamedTuple

from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast import linear as fast_linear
from minitransformer.nn.module import Module, Parameter, check_array


class LinearCache(NamedTuple):
    """What :func:`linear_backward` needs."""

    x: object  # (..., D_in) the input: dW = x^T dy
    W: object  # (D_in, D_out) the weight: dx = dy W^T
    has_bias: bool  # whether there is a db to return


def linear_forward(x, W, b=None):
    """x (..., D_in), W (D_in, D_out), b (D_out,) or None -> y (..., D_out), cache."""
    backend.check_linear_inputs(x, W)
    x2 = x.reshape(-1, W.shape[0])  # (N, D_in): one 2-D product over all rows
    y = x2 @ W  # (N, D_out)
    if b is not None:
        y = y + b  # (N, D_out)
    y = y.reshape(*x.shape[:-1], W.shape[1])  # (..., D_out)
    return y, LinearCache(x, W, b is not None)


def linear_backward(dy, cache: LinearCache):
    """dy (..., D_out) -> dx (..., D_in), dW (D_in, D_out), db (D_out,) or None."""
    x, W, has_bias = cache
    D_in, D_out = W.shape
    dy2 = dy.reshape(-1, D_out)  # (N, D_out)
    x2 = x.reshape(-1, D_in)  # (N, D_in), in the forward pass this was the input
    dx = (dy2 @ W.T).reshape(x.shape)  # (..., D_in)
    dW = x2.T @ dy2  # (D_in, D_out)
    db = dy2.sum(axis=0) if has_bias else None  # (D_out,)
    return dx, dW, db


def uniform_init(shape, bound: float, rng: backend.RNG):
    """U(-bound, bound) of the given shape, in the default dtype."""
    return (rng.host_random(shape) * 2.0 - 1.0) * bound  # (shape), drawn on the host: the same on every device


class Linear(Module):
    """``y = x @ weight + bias``; ``weight`` starts in U(-1/sqrt(d_in), 1/sqrt(d_in)), ``bias`` at 0."""

    def __init__(self, d_in: int, d_out: int, bias: bool = True, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.d_in, self.d_out = d_in, d_out
        self.weight = Parameter(uniform_init((d_in, d_out), 1.0 / math.sqrt(d_in), rng))  # (d_in, d_out)
        self.bias = Parameter(xp.zeros(d_out, dtype=backend.get_dtype())) if bias else None  # (d_out,)

    def extra_repr(self):
        return f"in={self.d_in}, out={self.d_out}, bias={self.bias is not None}"

    def forward(self, x):
        """x: (..., d_in) -> (..., d_out)."""
        check_array(x, "Linear")
        b = None if self.bias is None else self.bias.data
        if not kernels.fast:  # the reference kernel, the math of this file
            y, self.cache = linear_forward(x, self.weight.data, b)
        else:  # the fast twin (minitransformer/fast/linear.py), proven equal in tests/fast
            y, self.cache = fast_linear.linear_forward(x, self.weight.data, b)
        return y

    def backward(self, dy):
        """dy: (..., d_out) -> dx (..., d_in); adds into weight.grad and bias.grad."""
        cache = self._require_cache()
        if isinstance(cache, fast_linear.FastLinearCache):  # the set that made the cache
            dx, dW, db = fast_linear.linear_backward(dy, cache)
        else:
            dx, dW, db = linear_backward(dy, cache)
        self.weight.grad += dW
        if self.bias is not None:
            self.bias.grad += db
        return dx
