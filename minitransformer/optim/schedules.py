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
import numbers

__all__ = ["Schedule", "ConstantLR", "NoamLR", "WarmupCosineLR"]


def _rate(name: str, value) -> float:
    """A rate setting: a finite number >= 0."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (
            math.isfinite(value) and value >= 0):
        positive = "factor" in name  # a factor of 0 is refused by the caller
        raise ValueError(f"{name} must be finite and {'> 0' if positive else '>= 0'}, got {value!r}")
    return float(value)


def _whole(name: str, value, minimum: int) -> int:
    """A step count or size: a whole number >= ``minimum`` (2.0 is accepted, 2.5 is not)."""
    ok = (not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
          and float(value) == int(value) and value >= minimum)
    if not ok:
        raise ValueError(f"{name} must be a whole number {'> 0' if minimum == 1 else f'>= {minimum}'}, "
                         f"got {value!r}")
    return int(value)


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
        self.lr = _rate("lr", lr)

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
        self.d_model = _whole("NoamLR: d_model", d_model, 1)
        self.warmup = _whole("NoamLR: warmup", warmup, 1)
        self.factor = _rate("NoamLR: factor", factor)
        if self.factor == 0:
            raise ValueError("NoamLR: factor must be finite and > 0, got 0")

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
        self.lr = _rate("WarmupCosineLR: lr", lr)
        self.min_lr = _rate("WarmupCosineLR: min_lr", min_lr)
        if self.min_lr > self.lr:
            raise ValueError(f"WarmupCosineLR: min_lr={min_lr!r} must not exceed lr={lr!r} (the floor "
                             "of the decay must not be above its peak)")
        self.warmup = _whole("WarmupCosineLR: warmup", warmup, 0)
        self.total = _whole("WarmupCosineLR: total", total, 1)
        if self.total <= self.warmup:
            raise ValueError(f"WarmupCosineLR needs 0 <= warmup < total, got warmup={warmup}, "
                             f"total={total}")

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
