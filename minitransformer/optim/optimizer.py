r"""The Adam update, the :class:`Optimizer` base class, and :class:`Adam` / :class:`AdamW`.

Notation as in :mod:`minitransformer.optim`; SGD and Adamax are in
:mod:`~minitransformer.optim.sgd_adamax`. Parameters are addressed by name, their
state in ``optimizer.state[name]``, so a misfit checkpoint names its tensor.
``optimizer.t`` moves once per :meth:`Optimizer.step`, not once per parameter
(the bias corrections would run :math:`P` times too fast). Each parameter counts its own updates in ``optimizer.steps[name]`` (Adam's
:math:`t`; frozen parameters are skipped), so one unfrozen after 100 steps takes a
first step, not a 101st. Scalars that meet arrays are Python floats, so a float32
model stays float32.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Iterable

import numpy as np  # the number types a setting may have

from minitransformer import kernels
from minitransformer.backend import xp
from minitransformer.fast import optimizer as fast_optimizer
from minitransformer.optim.groups import checked_pairs, param_groups, split_groups  # noqa: F401 (param_groups re-exported)
from minitransformer.optim.state import OptimizerState

__all__ = ["Optimizer", "Adam", "AdamW", "adam_update", "default_no_decay", "param_groups"]


def adam_update(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay=0.0, decoupled=False):
    r"""One Adam step for one tensor: new arrays out, inputs untouched. With
    :math:`\theta, g, t, \eta, \lambda` = ``param, grad, step, lr, weight_decay``:

    .. math::

        \tilde g &= \begin{cases} g + \lambda\,\theta & \text{L2 decay (decoupled=False)} \\
                                  g & \text{decoupled decay} \end{cases} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1)\, \tilde g \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2)\, \tilde g^2 \\
        \hat m_t &= \frac{m_t}{1 - \beta_1^t}, \qquad
        \hat v_t = \frac{v_t}{1 - \beta_2^t} \\
        \theta' &= \begin{cases} \theta & \text{L2 decay} \\
                                 \theta - \eta\lambda\,\theta & \text{decoupled decay} \end{cases} \\
        \theta_t &= \theta' - \eta\, \frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}

    The factors :math:`1/(1-\beta^t)` undo the bias of the zero-initialised
    averages (with :math:`\beta_2 = 0.999`, :math:`v_1` is only
    :math:`0.001\, g^2`); :math:`\epsilon` is added *after* that correction.

    ``param, grad, m, v``: arrays of one shape ``S`` (``m, v`` zeros before step 1);
    the scalars are Python floats. Returns new (S) arrays :math:`\theta_t, m_t, v_t`.
    """
    dtype = param.dtype
    if weight_decay and not decoupled:
        g = grad + weight_decay * param  # (S) L2 decay joins the gradient
    else:
        g = grad  # (S) read only
    m = beta1 * m + (1.0 - beta1) * g  # (S) m_t
    v = beta2 * v + (1.0 - beta2) * (g * g)  # (S) v_t
    m_hat = m / (1.0 - beta1 ** step)  # (S) bias-corrected m_t
    v_hat = v / (1.0 - beta2 ** step)  # (S) bias-corrected v_t
    if weight_decay and decoupled:
        param = param - lr * weight_decay * param  # (S) theta', decoupled decay
    param = param - lr * m_hat / (xp.sqrt(v_hat) + eps)  # (S) theta_t
    # NumPy turns 0-d results into scalars: make them arrays of param's dtype again.
    return (xp.asarray(param, dtype=dtype),  # (S)
            xp.asarray(m, dtype=dtype),  # (S)
            xp.asarray(v, dtype=dtype))  # (S)


def is_parameter(obj) -> bool:
    """True for anything with ``data`` and ``grad``."""
    return hasattr(obj, "data") and hasattr(obj, "grad")


def named_parameters(params) -> list[tuple[str, object]]:
    """``(name, Parameter)`` pairs from a module or an iterable of pairs; refuses bare
    Parameters, no parameters, a repeated name, or a Parameter listed twice."""
    if hasattr(params, "named_parameters"):
        pairs = list(params.named_parameters())
    else:
        pairs = checked_pairs(params, is_parameter)
    if not pairs:
        raise ValueError("the optimizer got no parameters")
    counts = Counter(n for n, _ in pairs)
    dup_names = sorted(n for n, k in counts.items() if k > 1)
    if dup_names:
        raise ValueError(f"duplicate parameter names: {', '.join(dup_names)}")
    ids: dict[int, str] = {}
    for n, p in pairs:
        if id(p) in ids:
            raise ValueError(f"the same Parameter appears twice, as {ids[id(p)]!r} and {n!r}; "
                             "it would be updated twice per step")
        ids[id(p)] = n
    return pairs


def default_no_decay(name: str, param) -> bool:
    """True (exempt from weight decay) for ``ndim < 2``: biases, LayerNorm gains and shifts, scalars."""
    return param.data.ndim < 2


def as_number(name: str, value) -> float:
    """``value`` as a Python float, or a ValueError naming the setting."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def check_lr(value, name: str = "lr") -> float:
    """A learning rate: finite and >= 0 (0 freezes the weights)."""
    lr = as_number(name, value)
    if not (math.isfinite(lr) and lr >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return lr


def check_hyperparameter(name: str, value):
    """One setting of the Adam family, checked; ``load_state_dict`` checks a checkpoint with it."""
    if name == "lr":
        return check_lr(value)
    if name == "weight_decay":
        wd = as_number(name, value)
        if not (math.isfinite(wd) and wd >= 0):
            raise ValueError(f"weight_decay must be finite and >= 0, got {value!r}")
        return wd
    if name == "eps":
        eps = as_number(name, value)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be finite and > 0, got {value!r}")
        return eps
    if name == "betas":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
            raise ValueError(f"betas must be two numbers (beta1, beta2), got {value!r}")
        b1, b2 = (as_number("betas", b) for b in value)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {tuple(value)!r}")
        return (b1, b2)
    raise ValueError(f"unknown optimizer setting {name!r}")


class Optimizer(OptimizerState):
    r"""Parameters by name, the step counter, the learning rate.

    A subclass defines ``_state_keys`` (per-parameter arrays, zeros shaped like
    it), ``_hyper`` (the settings a checkpoint saves) and ``_update(name, p, state, lr)``.

    Args:
        params: a module, ``(name, Parameter)`` pairs, or parameter groups
            (:mod:`minitransformer.optim.groups`).
        lr: a float or a schedule ``t -> float``; ``self.lr`` is the latest step's.
        weight_decay: :math:`\lambda \ge 0`.
        no_decay: ``None`` (:func:`default_no_decay`), names, or ``(name, Parameter) -> bool``.
    """

    _state_keys: tuple[str, ...] = ()
    _hyper: tuple[str, ...] = ("weight_decay",)
    _check_setting = staticmethod(check_hyperparameter)  # how load_state_dict checks a setting

    def __init__(self, params, lr, weight_decay: float = 0.0,
                 no_decay: Callable | Iterable[str] | None = None):
        if isinstance(params, (list, tuple)) and params and isinstance(params[0], dict):
            pairs, self.param_groups = split_groups(params, check_lr, check_hyperparameter, is_parameter)
        else:  # one group of everything, with the optimizer's settings
            pairs, self.param_groups = params, [{"names": None, "lr": None, "schedule": None,
                                                  "weight_decay": None}]
        self.params: dict[str, object] = dict(named_parameters(pairs))
        self.param_groups[0]["names"] = self.param_groups[0]["names"] or list(self.params)
        self._group_of = {n: i for i, g in enumerate(self.param_groups) for n in g["names"]}
        if callable(lr):
            self.schedule = lr
            self.lr = self._scheduled_lr(1)
        else:
            self.schedule = None
            self.lr = check_lr(lr)
        self.weight_decay = check_hyperparameter("weight_decay", weight_decay)
        self._decay = self._resolve_no_decay(no_decay)
        self.t = 0
        self.steps: dict[str, int] = {name: 0 for name in self.params}  # updates of each parameter
        self.state: dict[str, dict] = {
            name: {key: xp.zeros_like(p.data) for key in self._state_keys}  # each (*p.shape)
            for name, p in self.params.items()
        }

    def _resolve_no_decay(self, no_decay) -> dict[str, bool]:
        """{name: True if weight decay applies to it}."""
        if no_decay is None:
            no_decay = default_no_decay
        if callable(no_decay):
            return {n: not bool(no_decay(n, p)) for n, p in self.params.items()}
        exempt = set(no_decay)
        unknown = sorted(exempt - set(self.params))
        if unknown:
            raise ValueError(f"no_decay names unknown parameters: {', '.join(unknown)}")
        return {n: n not in exempt for n in self.params}

    def decayed_names(self) -> list[str]:
        """The decayed parameters: by their group's ``weight_decay``, else by ``no_decay``."""
        own = {n: self.param_groups[i]["weight_decay"] for n, i in self._group_of.items()}
        return [n for n in self.params if (self._decay[n] if own[n] is None else own[n] > 0)]

    def weight_decay_of(self, name: str) -> float:
        """One parameter's coefficient: its group's, else the optimizer's (0 if exempt)."""
        wd = self.param_groups[self._group_of[name]]["weight_decay"]
        return wd if wd is not None else (self.weight_decay if self._decay[name] else 0.0)

    def get_lr(self, t: int | None = None) -> float:
        """The learning rate of step ``t`` (default: the next step)."""
        if self.schedule is None:
            return self.lr
        return float(self.schedule(self.t + 1 if t is None else t))

    def _scheduled_lr(self, t: int, schedule=None) -> float:
        """The schedule's rate for step ``t``, refused unless finite and >= 0."""
        schedule = schedule or self.schedule
        lr = schedule(t)
        try:
            return check_lr(lr)
        except ValueError:
            raise ValueError(
                f"the learning-rate schedule {schedule!r} gave lr={lr!r} for step {t}; a learning "
                "rate must be finite and >= 0, so no update was made: fix the schedule") from None

    def zero_grad(self) -> None:
        """Set every gradient to zero (backward passes accumulate with ``+=``)."""
        for p in self.params.values():
            p.grad.fill(0)

    def zero_model_grad(self, model) -> None:
        """``model.zero_grad()``, in one fill for the gradients the fast set laid out flat for this
        optimizer (:func:`minitransformer.fast.optimizer.zero_grad`); a gradient of the model's that
        this optimizer does not hold is zeroed too, and one outside the model is left as it is."""
        fast_optimizer.zero_grad(model, self)

    def close(self) -> None:
        """Let go of what the fast set laid out for this optimizer (its tensors get arrays of their
        own again, the same values): a finished training run closes its optimizer, so that a next
        phase's optimizer over the same weights lays them out itself."""
        fast_optimizer.release(self)

    def step(self) -> None:
        """One update of every unfrozen parameter from its ``grad``; ``t`` moves once.
        A schedule's bad rate raises before anything changes."""
        lr = self._scheduled_lr(self.t + 1) if self.schedule is not None else self.lr  # every rate checked first
        group_lrs = [self._scheduled_lr(self.t + 1, g["schedule"]) if g["schedule"] is not None else g["lr"]
                     for g in self.param_groups]
        self.lr = lr
        for g, group_lr in zip(self.param_groups, group_lrs):
            g["lr"] = group_lr
        self.t += 1
        lrs = [self.lr if g["lr"] is None else g["lr"] for g in self.param_groups]
        trainable = [(n, p) for n, p in self.params.items() if getattr(p, "requires_grad", True)]
        for name, p in trainable:
            self.steps[name] += 1
            state = self.state[name]
            for key, arr in state.items():  # the model was cast (astype) after we were built
                if arr.dtype != p.data.dtype:
                    state[key] = arr.astype(p.data.dtype)  # (*p.shape)
        if kernels.fast and fast_optimizer.step_flat(self, trainable, lrs):  # fast/engine/flat.py
            return
        for name, p in trainable:
            self._update(name, p, self.state[name], lrs[self._group_of[name]])

    def _update(self, name: str, p, state: dict, lr: float) -> None:  # pragma: no cover
        raise NotImplementedError


class Adam(Optimizer):
    r"""Adam (Kingma & Ba, 2015): :func:`adam_update` with L2 decay, :math:`\lambda\theta`
    added to the gradient.

    The decay then passes through :math:`v_t`, so heavily-updated weights are
    decayed less; :class:`AdamW` decouples it. State: ``{"m": m, "v": v}``,
    each shaped like the parameter.
    """

    _state_keys = ("m", "v")
    _hyper = ("betas", "eps", "weight_decay")
    _decoupled = False  # how weight decay enters adam_update
    _flat_layout = True  # updates in place: the fast set lays it out flat

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, no_decay=None):
        self.betas, self.eps = check_hyperparameter("betas", betas), check_hyperparameter("eps", eps)
        super().__init__(params, lr, weight_decay, no_decay)

    def _update(self, name, p, state, lr):
        (b1, b2), eps, t = self.betas, self.eps, self.steps[name]  # this parameter's update count
        wd = self.weight_decay_of(name)
        m, v = state["m"], state["v"]
        if not kernels.fast:  # the reference kernel
            p.data, state["m"], state["v"] = adam_update(  # (*p.shape) each
                p.data, p.grad, m, v, t, lr, b1, b2, eps, wd, self._decoupled)
        else:  # its in-place twin in fast/optimizer.py
            p.data, state["m"], state["v"] = fast_optimizer.adam_update(  # (*p.shape) each
                p.data, p.grad, m, v, t, lr, b1, b2, eps, wd, self._decoupled)


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov & Hutter, 2019):
    :math:`\theta' = \theta - \eta_t\lambda\theta` before the Adam step, so the decay
    never passes through the adaptive denominator, and follows the schedule's :math:`\eta_t`.
    """

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, no_decay=None):
        super().__init__(params, lr, betas, eps, weight_decay, no_decay)
