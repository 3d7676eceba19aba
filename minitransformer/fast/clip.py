"""The global-norm clipping on a GPU: the fast twin of :mod:`minitransformer.optim.clip`.

:func:`minitransformer.optim.clip.clip_grad_norm` takes this path when the fast set is
selected and every gradient is a CuPy array of one dtype (:func:`usable`). The math and
the rules are the reference's (the norm before clipping returned as a 0-d device array,
the same factor on every gradient, a NaN or infinite norm leaves them untouched, nothing
read back to the host); what differs is the number of launches: per gradient, one for
its sum of squares (written into a slot of one float64 array, not added up in Python)
and one for the scaling by a factor that stays on the device, against four for the
reference's chain. Sums in float64, in a fixed order. ``tests/fast/test_fast_cuda.py``
proves it equal to the reference on a GPU.
"""
from __future__ import annotations

from minitransformer.backend import xp
from minitransformer.fast import cuda


def usable(plist) -> bool:
    """True when the fused kernels can clip these Parameters' gradients."""
    grads = [p.grad for p in plist]
    return bool(grads) and cuda.usable(*grads) and cuda.contiguous(*grads)


def clip_grad_norm(plist, max_norm: float | None):
    """As :func:`minitransformer.optim.clip.clip_grad_norm`, for a list of trainable
    Parameters (each once) whose gradients :func:`usable` accepts."""
    squares = xp.empty(len(plist), dtype=xp.float64)  # (P,) one slot per gradient
    for i, p in enumerate(plist):
        cuda.sum_squares(p.grad, squares[i:i + 1])
    # The sum of squares in the gradients' dtype before the root, as the reference forms it:
    # a float32 sum beyond 3.4e38 is infinite there, and so here (the divergence signal).
    norm = xp.sqrt(squares.sum().astype(plist[0].grad.dtype))  # ()
    if max_norm is None:
        return norm
    scale = xp.minimum(1.0, max_norm / (norm + 1e-6))  # ()
    scale = xp.where(xp.isfinite(norm), scale, 1.0).astype(xp.float64)  # () NaN/inf norm: untouched
    for p in plist:
        cuda.scale_by(p.grad, scale)
    return norm
