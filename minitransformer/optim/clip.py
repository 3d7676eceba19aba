r"""Gradient clipping by the global L2 norm of all gradients.

Clipping runs between the backward pass and the optimizer step: it measures
how large the whole gradient is and, if it is too large, shrinks every
gradient by the same factor, so the direction of the update is kept and only
its length is capped. Frozen parameters (``requires_grad`` False) take no part. There is one function, :func:`clip_grad_norm`, and it
never reads a value back from the device: the norm it returns is a 0-d array,
and ``float(norm)`` is the caller's choice (and the caller's host sync).

**The NaN rule.** When the norm is NaN or infinite, the gradients are left
exactly as they are and the norm is returned as it is. Scaling cannot repair
such a gradient (:math:`0 \cdot \infty` and :math:`0 \cdot \text{NaN}` are
NaN), and a quietly changed gradient would hide the problem; the returned
norm says what happened, and the caller decides. The trainer
(:mod:`minitransformer.train`) checks it: reading every step, it raises
``TrainingDiverged`` before the optimizer step; reading every few steps (on a
GPU), it zeroes that step's gradients on the device and raises at the next
read, so no NaN reaches the weights either way.

``clip_grad_norm_on_device`` is a deprecated alias of :func:`clip_grad_norm`,
kept so that code importing it still runs. (It used to zero the gradients on a
non-finite norm; it now follows the rule above.)
"""
from __future__ import annotations

from minitransformer import kernels
from minitransformer.backend import xp
from minitransformer.fast import clip as fast_clip
from minitransformer.optim.optimizer import is_parameter

__all__ = ["clip_grad_norm", "clip_grad_norm_on_device"]


def _grad_norm_squared(plist):
    """Sum of squares of every gradient, as a 0-d device array (no host sync)."""
    total = 0.0
    for p in plist:
        g = p.grad.ravel()                       # (numel,) a view
        total = total + xp.vdot(g, g)            # ()
    return total


def parameter_list(params) -> list:
    """Trainable Parameters (each once) from a module, Parameters, or (name, Parameter)
    pairs. Frozen ones (``requires_grad`` False) are left out."""
    items = params.parameters() if hasattr(params, "parameters") else params
    out, seen = [], set()
    for item in items:
        p = item if is_parameter(item) else item[1]
        if id(p) not in seen and getattr(p, "requires_grad", True):
            seen.add(id(p))
            out.append(p)
    return out


def clip_grad_norm(params, max_norm: float | None):
    r"""Rescale all gradients together so that their global L2 norm is at most ``max_norm``.

    The global norm treats all gradients as one long vector; every gradient is
    then multiplied by the same factor :math:`s`:

    .. math::

        n = \Big(\sum_{p} \sum_{i} g_{p,i}^2\Big)^{1/2}, \qquad
        s = \min\!\Big(1,\; \frac{c}{n + 10^{-6}}\Big), \qquad
        g_p \leftarrow s\, g_p,

    with :math:`c` = ``max_norm``. Below the threshold :math:`s = 1` and the
    gradients keep their values; above it the new norm is :math:`c` (up to the
    :math:`10^{-6}` that guards against division by zero). Clipping the global
    norm, rather than each tensor separately, keeps the direction of the full
    gradient. Nothing is read back to the host, so a GPU training step does
    not wait here.

    Args:
        params: a module, a list of Parameters, or ``(name, Parameter)`` pairs.
            A Parameter listed twice (tied weights) counts once. A frozen one
            (``requires_grad`` False) neither counts in the norm nor is scaled:
            the optimizer does not use its gradient (PyTorch likewise skips
            parameters whose grad is None).
        max_norm: the threshold :math:`c > 0`, or ``None`` to measure only
            (the gradients are not touched).

    Returns:
        :math:`n`, the norm *before* clipping, as a 0-d array on the device
        (``float(norm)`` for a Python number). If :math:`n` is NaN or infinite
        the gradients are left untouched (see the module docstring): check the
        returned norm before stepping the optimizer.
    """
    if max_norm is not None and not max_norm > 0:
        raise ValueError(f"max_norm must be > 0 (or None to measure only), got {max_norm}")
    plist = parameter_list(params)
    fused = kernels.fast and fast_clip.usable(plist)  # a GPU: fused launches (fast/clip.py)
    if fused:
        norm = fast_clip.grad_norm(plist)                  # ()
    else:
        norm = xp.asarray(xp.sqrt(_grad_norm_squared(plist)))  # () 0-d array, even where NumPy gives a scalar
    if max_norm is None:
        return norm
    scale = xp.minimum(1.0, max_norm / (norm + 1e-6))      # ()
    scale = xp.where(xp.isfinite(norm), scale, 1.0)       # () NaN/inf norm: gradients untouched
    if fused:
        fast_clip.scale_grads(plist, scale)
    else:
        for p in plist:
            p.grad *= scale.astype(p.grad.dtype)
    return norm


#: Deprecated alias of :func:`clip_grad_norm` (same function, same NaN rule), kept for old imports.
clip_grad_norm_on_device = clip_grad_norm
