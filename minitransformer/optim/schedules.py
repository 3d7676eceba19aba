r"""Learning-rate schedules: pure functions from the optimizer step to the rate.

An optimizer accepts either a constant learning rate or a *schedule*, any
callable ``schedule(t) -> float`` that returns the rate itself (not a
multiplier) for step ``t = 1, 2, ...``. This module holds the schedules the
library ships:

* :class:`ConstantLR`: :math:`\eta_t = \eta`;
* :class:`NoamLR`: linear warmup, then :math:`t^{-1/2}` decay (the original
  transformer recipe);
* :class:`WarmupCosineLR`: linear warmup, then a half cosine down to a floor.

A schedule keeps no mutable state, so resuming from a checkpoint needs nothing
but the optimizer's step counter ``t``. Scalars here are plain Python floats:
no array is touched, so there is nothing to keep on a device.
"""
from __future__ import annotations

import math

__all__ = ["Schedule", "ConstantLR", "NoamLR", "WarmupCosineLR"]


class Schedule:
    r"""A learning-rate schedule: a pure function from the step to the rate.

    ``schedule(t)`` returns the learning rate :math:`\eta_t` (a Python float)
    for optimizer step ``t``. Steps count from 1, as ``optimizer.t`` does during
    an update; :math:`t \le 0` ("before training") is defined by each schedule.
    A schedule holds no mutable state, so resuming from a checkpoint only needs
    the optimizer's ``t``.

    Any plain function ``t -> float`` works as a schedule too; subclass this for
    a readable ``repr`` in logs.
    """

    def __call__(self, step: int) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class ConstantLR(Schedule):
    r"""The same rate at every step: :math:`\eta_t = \eta`."""

    def __init__(self, lr: float):
        if not lr >= 0:
            raise ValueError(f"lr must be >= 0, got {lr}")
        self.lr = float(lr)

    def __call__(self, step: int) -> float:
        return self.lr


class NoamLR(Schedule):
    r"""The warmup/inverse-square-root schedule of *Attention Is All You Need*.

    .. math::

        \eta_t = f \, d_{\text{model}}^{-1/2}
                 \min\!\left(t^{-1/2},\; t \, w^{-3/2}\right), \qquad t \ge 1,

    with factor :math:`f` and warmup length :math:`w`. The rate grows linearly
    for :math:`t \le w`, peaks at :math:`t = w` with
    :math:`\eta_w = f\, d_{\text{model}}^{-1/2} w^{-1/2}`, and then decays like
    :math:`t^{-1/2}`. For :math:`t \le 0` it returns 0 (the limit of the
    linear branch).
    """

    def __init__(self, d_model: int, warmup: int, factor: float = 1.0):
        if d_model <= 0 or warmup <= 0 or not factor > 0:
            raise ValueError(
                f"NoamLR needs d_model > 0, warmup > 0 and factor > 0; got d_model={d_model}, "
                f"warmup={warmup}, factor={factor}")
        self.d_model = int(d_model)
        self.warmup = int(warmup)
        self.factor = float(factor)

    def __call__(self, step: int) -> float:
        t = float(step)
        if t <= 0:
            return 0.0
        return self.factor * self.d_model ** -0.5 * min(t ** -0.5, t * self.warmup ** -1.5)


class WarmupCosineLR(Schedule):
    r"""Linear warmup to ``lr``, then a half-cosine decay to ``min_lr``.

    With peak rate :math:`\eta`, floor :math:`\eta_{\min}`, warmup length
    :math:`w \ge 0` and total length :math:`T > w`:

    .. math::

        \eta_t = \begin{cases}
            \eta \, \dfrac{t}{w} & 0 \le t < w \\[1ex]
            \eta_{\min} + \dfrac{\eta - \eta_{\min}}{2}
                \left(1 + \cos\!\left(\pi \, \dfrac{t - w}{T - w}\right)\right)
                & w \le t \le T \\[1ex]
            \eta_{\min} & t > T
        \end{cases}

    so :math:`\eta_0 = 0`, :math:`\eta_w = \eta` (the peak), the rate halfway
    through the decay is :math:`(\eta + \eta_{\min})/2`, and
    :math:`\eta_T = \eta_{\min}`, held constant afterwards. With :math:`w = 0`
    there is no warmup. For :math:`t < 0` it returns 0.
    """

    def __init__(self, lr: float, warmup: int, total: int, min_lr: float = 0.0):
        if not lr >= 0 or not min_lr >= 0:
            raise ValueError(f"lr and min_lr must be >= 0, got lr={lr}, min_lr={min_lr}")
        if warmup < 0 or total <= warmup:
            raise ValueError(f"WarmupCosineLR needs 0 <= warmup < total, got warmup={warmup}, "
                             f"total={total}")
        self.lr = float(lr)
        self.warmup = int(warmup)
        self.total = int(total)
        self.min_lr = float(min_lr)

    def __call__(self, step: int) -> float:
        t = float(step)
        if t < 0:
            return 0.0
        if t < self.warmup:
            return self.lr * t / self.warmup
        if t > self.total:
            return self.min_lr
        progress = (t - self.warmup) / (self.total - self.warmup)  # in [0, 1]
        return self.min_lr + 0.5 * (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * progress))
