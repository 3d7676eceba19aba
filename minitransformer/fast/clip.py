"""The two passes of the global-norm clipping on a GPU: the fast twin of ``optim/clip.py``.

:func:`minitransformer.optim.clip.clip_grad_norm` keeps the rule (the factor, the NaN rule,
``max_norm=None``) and calls :func:`grad_norm` and :func:`scale_grads` here when the fast
set is selected and every gradient is a CuPy array of one dtype (:func:`usable`). What
differs is the number of launches: per gradient, one for its sum of squares (written
into a slot of one float64 array, not added up in Python) and one for the scaling by a
factor that stays on the device, against four for the reference's chain. Sums in
float64, in a fixed order. Where the gradients are an optimizer's flat layout
(:mod:`minitransformer.fast.engine.flat`), the sum of squares is one launch over its chunks
and the scaling one launch over the buffer, whatever the number of tensors.
``tests/fast/test_fast_cuda.py`` proves it equal to the reference on a GPU.
"""
from __future__ import annotations

from minitransformer.backend import xp
from minitransformer.fast.engine import cuda, cuda_flat, flat


def usable(plist) -> bool:
    """True when the fused kernels can take these Parameters' gradients."""
    grads = [p.grad for p in plist]
    return bool(grads) and cuda.usable(*grads) and cuda.contiguous(*grads)


def grad_norm(plist):
    """The global L2 norm of the gradients, a 0-d array in their dtype: per gradient one
    sum of squares (float64) into a slot, or one launch over the chunks of an optimizer's
    flat layout when it holds exactly these gradients, then the root of their sum. The sum is cast to
    the gradients' dtype before the root, as the reference forms it: a float32 sum beyond
    3.4e38 is infinite there, and so here (the divergence signal)."""
    layout = flat.covering(plist)
    if layout is not None:  # every gradient in one buffer: one launch for all
        return xp.sqrt(cuda_flat.sum_squares_flat(layout).astype(plist[0].grad.dtype))  # ()
    squares = xp.empty(len(plist), dtype=xp.float64)  # (P,) one slot per gradient
    for i, p in enumerate(plist):
        cuda.sum_squares(p.grad, squares[i:i + 1])
    return xp.sqrt(squares.sum().astype(plist[0].grad.dtype))  # ()


def scale_grads(plist, scale) -> None:
    """Every gradient *= ``scale`` (a 0-d device array), in place: one launch each, or one for a flat layout."""
    scale = scale.astype(xp.float64)  # () the kernels read a double
    layout = flat.covering(plist)
    if layout is not None:  # one launch over the buffer (its gaps are zeros)
        cuda.scale_by(layout.grad, scale)
        return
    for p in plist:
        cuda.scale_by(p.grad, scale)
