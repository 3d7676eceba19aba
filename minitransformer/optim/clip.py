r"""Gradient clipping by the global L2 norm of all gradients.

Clipping runs between the backward pass and the optimizer step: it measures
how large the whole gradient is and, if it is too large, shrinks every
gradient by the same factor, so the direction of the update is kept and only
its length is capped.
"""
from __future__ import annotations

import math

from minitransformer.backend import xp
from minitransformer.optim._params import parameter_list

__all__ = ["clip_grad_norm", "clip_grad_norm_on_device"]


def _grad_norm_squared(plist):
    """Sum of squares of every gradient, as a 0-d device array (no host sync)."""
    total = 0.0
    for p in plist:
        g = p.grad.ravel()                       # (numel,) a view
        total = total + xp.vdot(g, g)            # ()
    return total


def clip_grad_norm(params, max_norm: float) -> float:
    r"""Rescale all gradients together so that their global L2 norm is at most ``max_norm``.

    The global norm treats all gradients as one long vector:

    .. math::

        n = \Big(\sum_{p} \sum_{i} g_{p,i}^2\Big)^{1/2}, \qquad
        g_p \leftarrow g_p \cdot \frac{c}{n + 10^{-6}} \quad \text{only if } n > c,

    with :math:`c` = ``max_norm``. Clipping the global norm (rather than each
    tensor separately) keeps the direction of the full gradient.

    Args:
        params: a module, a list of Parameters, or ``(name, Parameter)`` pairs.
            A Parameter listed twice (tied weights) counts once.
        max_norm: the threshold :math:`c > 0`.

    Returns:
        :math:`n`, the norm *before* clipping, as a Python float. If it is NaN
        or infinite it is returned as is and the gradients are left untouched
        (scaling by NaN would destroy them); the caller decides what to do.
    """
    if not max_norm > 0:
        raise ValueError(f"max_norm must be > 0, got {max_norm}")
    plist = parameter_list(params)
    total = _grad_norm_squared(plist)            # () on the device: one sync below
    norm = math.sqrt(float(total))
    if math.isfinite(norm) and norm > max_norm:
        scale = float(max_norm) / (norm + 1e-6)
        for p in plist:
            p.grad *= scale
    return norm


def clip_grad_norm_on_device(params, max_norm: float | None):
    r""":func:`clip_grad_norm` without a host round trip, for GPU training loops.

    Computes the global norm :math:`n` as a 0-d device array and multiplies every
    gradient by :math:`s = \min(1, c / (n + 10^{-6}))` (or 1 when ``max_norm`` is
    None). When :math:`n` is NaN or infinite, :math:`s = 0`: the step's gradients
    are dropped, so the weights stay finite until the trainer's next check sees the
    returned norm and stops. Returns :math:`n` (0-d, on the device).
    """
    plist = parameter_list(params)
    total = _grad_norm_squared(plist)            # () on the device
    norm = xp.sqrt(total)                        # ()
    scale = xp.ones_like(norm) if max_norm is None else xp.minimum(1.0, max_norm / (norm + 1e-6))  # ()
    scale = xp.where(xp.isfinite(norm), scale, 0.0)  # ()
    for p in plist:
        p.grad *= scale.astype(p.grad.dtype)
    return norm
