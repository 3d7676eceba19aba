r"""The Adam update of one tensor, in place: the fast twin of the reference kernel.

:func:`adam_update` here has the signature, the math and the return
convention of :func:`minitransformer.optim.optimizer.adam_update`, but it
does not build a new array per formula. It writes :math:`\theta_t, m_t, v_t`
into the arrays it was given (``param``, ``m``, ``v``) with in-place operators
and ``out=``, uses one scratch array the size of the parameter, and returns
those same three arrays. So the caller's
``p.data, state["m"], state["v"] = adam_update(...)`` works with either kernel:
here the assignment just rebinds each name to the array it already holds.

The cost of one call is one scratch allocation and about a dozen element-wise
passes over memory, against ten or so fresh arrays for the reference version;
``tests/fast/test_fast_optimizer.py`` checks that both give the same numbers.
On a GPU the whole update is one CUDA kernel (:mod:`minitransformer.fast.engine.cuda`).

The fast set's part of ``Optimizer.step`` is :func:`step_flat`: an Adam lays its tensors
out in flat buffers (:mod:`minitransformer.fast.engine.flat`) and, on a GPU, updates all of them
in one launch (:mod:`minitransformer.fast.engine.cuda_flat`). :func:`zero_grad` zeroes a model's
gradients with one ``fill`` for those an optimizer holds flat. The layout is kept here, by
optimizer, not on it: a copy of an optimizer (``copy.deepcopy``, pickle) lays out its own.
"""
from __future__ import annotations

import weakref

import numpy as np

from minitransformer.backend import xp
from minitransformer.fast.engine import cuda, cuda_flat, flat

__all__ = ["adam_update", "step_flat", "zero_grad", "release", "layout_of"]

_layouts: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # optimizer -> its FlatParameters


def adam_update(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay=0.0, decoupled=False):
    r"""One Adam step for one tensor, written into ``param``, ``m`` and ``v``.

    The same update as the reference kernel, with :math:`t` = ``step``,
    :math:`\eta` = ``lr`` and :math:`\lambda` = ``weight_decay``:

    .. math::

        \tilde g &= \begin{cases} g + \lambda\,\theta & \text{L2 decay (decoupled=False)} \\
                                  g & \text{decoupled decay} \end{cases} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1)\, \tilde g, \qquad
        v_t = \beta_2 v_{t-1} + (1 - \beta_2)\, \tilde g^2 \\
        \theta' &= \begin{cases} \theta & \text{L2 decay} \\
                                 (1 - \eta\lambda)\,\theta & \text{decoupled decay} \end{cases} \\
        \theta_t &= \theta' - \frac{\eta}{1 - \beta_1^t}\,
                    \frac{m_t}{\sqrt{v_t / (1 - \beta_2^t)} + \epsilon}

    The last line is the reference's :math:`\eta\,\hat m_t / (\sqrt{\hat v_t} +
    \epsilon)` with the scalar factors :math:`\eta/(1-\beta_1^t)` gathered into
    one multiplication; results differ from the reference only by rounding.

    With L2 decay, :math:`\tilde g` is formed in the scratch array twice (once
    for :math:`m_t`, once for :math:`v_t`) instead of being kept in a second
    array: two extra cheap passes, no extra memory.

    Args:
        param: :math:`\theta_{t-1}`, a writable float array of any shape ``S``;
            overwritten with :math:`\theta_t`.
        grad: :math:`g_t`, shape ``S``; only read.
        m: :math:`m_{t-1}`, shape ``S``; overwritten with :math:`m_t`.
        v: :math:`v_{t-1}`, shape ``S``; overwritten with :math:`v_t`.
        step: :math:`t \ge 1`, the number of this update (an int).
        lr: :math:`\eta \ge 0`, a Python float.
        beta1, beta2: :math:`\beta_1, \beta_2 \in [0, 1)`, Python floats.
        eps: :math:`\epsilon > 0`, a Python float.
        weight_decay: :math:`\lambda \ge 0`, a Python float (0 for an exempt parameter).
        decoupled: False for L2 decay inside the gradient, True for AdamW decay.

    Returns:
        ``(param, m, v)``: the very arrays passed in, now holding
        :math:`\theta_t, m_t, v_t`.
    """
    same_shape = grad.shape == param.shape == m.shape == v.shape  # a broadcast gradient: the chain below
    if same_shape and cuda.usable(param, grad, m, v) and cuda.contiguous(param, m, v):  # a GPU: one launch
        return cuda.adam_update(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay, decoupled)
    bc1 = 1.0 - beta1 ** step                       # Python floats: no float64 upcast
    bc2 = 1.0 - beta2 ** step
    l2 = bool(weight_decay) and not decoupled
    buf = xp.empty_like(param)                      # (S) the one scratch array

    # m_t = beta1 m + (1 - beta1) g~
    if l2:
        xp.multiply(param, weight_decay, out=buf)   # (S) lambda theta
        buf += grad                                 # (S) g~
        buf *= 1.0 - beta1                          # (S) (1 - beta1) g~
    else:
        xp.multiply(grad, 1.0 - beta1, out=buf)     # (S) (1 - beta1) g  (out=: 0-d stays an array)
    m *= beta1
    m += buf                                        # (S) m_t, in place

    # v_t = beta2 v + (1 - beta2) g~^2
    if l2:
        xp.multiply(param, weight_decay, out=buf)   # (S) lambda theta
        buf += grad                                 # (S) g~ again
        xp.multiply(buf, buf, out=buf)              # (S) g~^2
    else:
        xp.multiply(grad, grad, out=buf)            # (S) g^2
    buf *= 1.0 - beta2                              # (S) (1 - beta2) g~^2
    v *= beta2
    v += buf                                        # (S) v_t, in place

    # theta_t = theta' - lr / bc1 * m_t / (sqrt(v_t / bc2) + eps)
    if weight_decay and decoupled:
        param *= 1.0 - lr * weight_decay            # (S) theta', in place
    xp.divide(v, bc2, out=buf)                      # (S) v_hat
    xp.sqrt(buf, out=buf)                           # (S) sqrt(v_hat)
    buf += eps                                      # (S) denominator
    xp.divide(m, buf, out=buf)                      # (S) m_t / denominator
    buf *= lr / bc1                                 # (S) the step
    param -= buf                                    # (S) theta_t, in place
    return param, m, v


def layout_of(optimizer) -> flat.FlatParameters | None:
    """The flat layout of ``optimizer``'s tensors, or None (not laid out, or not yet stepped)."""
    return _layouts.get(optimizer)


def _lays_out(optimizer) -> bool:
    """True when the class that defines the optimizer's ``_update`` declares ``_flat_layout``:
    an update known to write ``p.data`` and every state array in place, one the flat kernel
    replaces. A subclass with an update of its own keeps the per-tensor arrays, and so does
    one that sets ``_flat_layout = False``."""
    owner = next(c for c in type(optimizer).__mro__ if "_update" in vars(c))
    return vars(owner).get("_flat_layout", False) and optimizer._flat_layout


def step_flat(optimizer, trainable: list, lrs: list) -> bool:
    """Lay out the ``(name, Parameter)`` pairs ``trainable`` flat (again, if anything was
    rebound), and on a GPU make Adam's update of all of them in one launch, each segment
    with its own step count, rate (``lrs``, by group) and decay. True if that update was
    made; False to have the caller update each tensor (on the views, on the CPU)."""
    if not _lays_out(optimizer):
        return False
    layout = flat.flatten(_layouts.get(optimizer), trainable, optimizer.state, optimizer._state_keys)
    if layout is None:
        _layouts.pop(optimizer, None)
        return False
    _layouts[optimizer] = layout
    if not cuda.usable(layout.data):
        return False
    (b1, b2), decoupled = optimizer.betas, optimizer._decoupled
    settings = np.empty((len(trainable), 4))  # (S, 4) per segment: lr / bc1, 1 / bc2, L2 decay, weight factor
    for row, (name, _) in zip(settings, trainable):
        t, lr = optimizer.steps[name], lrs[optimizer._group_of[name]]
        wd = optimizer.weight_decay_of(name)
        row[:] = (lr / (1.0 - b1 ** t), 1.0 / (1.0 - b2 ** t),
                  wd if wd and not decoupled else 0.0, 1.0 - lr * wd if wd and decoupled else 1.0)
    cuda_flat.adam_flat(layout, settings, b1, b2, optimizer.eps)
    return True


def zero_grad(model, optimizer=None) -> None:
    """``model.zero_grad()`` in fewer launches: the gradients ``optimizer`` holds in its
    flat layout in one ``fill`` (with the zero gaps between them) when all of them are
    the model's, every other one alone; a gradient outside the model is left as it is."""
    params = model.parameters()
    layout = _layouts.get(optimizer) if optimizer is not None else None
    done = set()
    if layout is not None and layout.within(params):
        layout.grad.fill(0)  # (N,)
        done = layout.grad_holders()
    for p in params:
        if id(p) not in done:
            p.grad.fill(0)


def release(optimizer) -> None:
    """Give ``optimizer``'s tensors arrays of their own again (the same values) and forget
    its layout: a finished training run does this, so that its optimizer, still referenced
    (by the run's result), keeps no later optimizer over the same weights from laying them
    out (a second training phase's)."""
    layout = _layouts.pop(optimizer, None)
    if layout is not None:
        layout.release(set())
