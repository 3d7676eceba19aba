r"""Affine map ``y = x W + b``: the workhorse of every transformer layer.

Forward, for ``x`` of shape (..., D_in) and ``W`` of shape (D_in, D_out):

.. math:: y = x W + b

Backward, given :math:`\partial L/\partial y` (written ``dy``), flattening the
leading axes into N rows:

.. math::
    \frac{\partial L}{\partial x} = dy\, W^\top, \qquad
    \frac{\partial L}{\partial W} = x^\top dy, \qquad
    \frac{\partial L}{\partial b} = \textstyle\sum_{n} dy_n .
"""
from __future__ import annotations

from minitransformer.backend import xp


def linear_forward(x, W, b=None):
    """``y = x @ W + b``.

    Args:
        x: (..., D_in) input.
        W: (D_in, D_out) weight. (Stored input-major so the forward is a plain matmul.)
        b: (D_out,) bias, or None.

    Returns:
        y: (..., D_out) output.
        cache: ``(x, W, has_bias)``; backward needs x for dW and W for dx.
    """
    if x.shape[-1] != W.shape[0]:
        raise ValueError(
            f"linear: input has last dimension {x.shape[-1]} but the weight expects "
            f"D_in={W.shape[0]} (weight shape {tuple(W.shape)})"
        )
    lead = x.shape[:-1]
    # One 2-D GEMM over all N = prod(lead) rows: NumPy's matmul on a 3-D x would run
    # one small GEMM per leading index instead (several times slower).
    y = x.reshape(-1, W.shape[0]) @ W  # (N, D_out)
    if b is not None:
        y += b  # (N, D_out), in place: no second temporary
    return y.reshape(*lead, W.shape[1]), (x, W, b is not None)  # (..., D_out)


def linear_backward(dy, cache):
    """Gradients of ``y = x @ W + b``.

    Args:
        dy: (..., D_out) upstream gradient.
        cache: from :func:`linear_forward`.

    Returns:
        dx: (..., D_in); dW: (D_in, D_out); db: (D_out,) or None when there was no bias.
    """
    x, W, has_bias = cache
    D_in, D_out = W.shape
    dy2 = dy.reshape(-1, D_out)  # (N, D_out), a view: rows are the flattened leading axes
    x2 = x.reshape(-1, D_in)  # (N, D_in), in the forward pass this was the input
    dx = (dy2 @ W.T).reshape(x.shape)  # (..., D_in), one 2-D GEMM
    dW = x2.T @ dy2  # (D_in, D_out)
    db = dy2.sum(axis=0) if has_bias else None  # (D_out,)
    return dx, dW, db
