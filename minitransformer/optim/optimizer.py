r"""The optimizer base class, the Adam update, and the Adam / AdamW optimizers.

An optimizer turns the gradients that the backward passes left in
``Parameter.grad`` into an update of ``Parameter.data``. This module holds

* :func:`adam_update`, the Adam step for one tensor written as a pure function
  (the *reference* kernel: one formula per line, new arrays out), first;
* :class:`Optimizer`, the bookkeeping every optimizer shares (parameters by
  name, the step counter, the learning rate or schedule, which parameters are
  decayed), and :func:`default_no_decay`; its checkpoint state (``state_dict``,
  ``load_state_dict``) is the mixin :class:`~minitransformer.optim.state.OptimizerState`;
* :class:`Adam` and :class:`AdamW`, which apply it to every parameter.

SGD and Adamax live in :mod:`minitransformer.optim.sgd_adamax`; the notation
(:math:`\theta, g_t, \eta_t, \lambda`) is the one of :mod:`minitransformer.optim`.

**Parameters are addressed by name**, each with its state in
``optimizer.state[name]`` (arrays shaped like the parameter), so a checkpoint is
readable and a misfit names its tensor. **The step counter** ``optimizer.t``
moves once at the start of each :meth:`Optimizer.step`, so every parameter of an
update sees the same :math:`t` (moving it inside the per-parameter loop is a
classic bug: the bias corrections would run :math:`P` times too fast).

**Learning rate.** ``lr`` is a float or a schedule ``t -> float``
(:mod:`minitransformer.optim.schedules`), kept in ``optimizer.schedule``;
``optimizer.lr`` is always the float of the latest step (what a log prints).

**Weight decay** skips exempt parameters: by default (:func:`default_no_decay`) those
with fewer than two dimensions (biases, LayerNorm gains and shifts); ``no_decay`` may
be ``()``, a list of names or a predicate ``(name, Parameter) -> bool`` instead.
**Parameter groups** (:mod:`minitransformer.optim.groups`) give a group its own ``lr``
and ``weight_decay``. **Frozen parameters** (``requires_grad`` False) are skipped, and
each parameter counts its own updates (``optimizer.steps[name]``, for Adam's bias
correction): one unfrozen after 100 steps takes a first step, not a 101st.

Every scalar that meets an array (learning rate, betas, bias corrections) is a
plain Python float, so a float32 model stays float32.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Iterable

import numpy as np  # the number types a setting may have

from minitransformer import kernels
from minitransformer.backend import xp
from minitransformer.fast import optimizer as fast_optimizer
from minitransformer.optim.groups import param_groups, split_groups  # noqa: F401 (param_groups re-exported)
from minitransformer.optim.state import OptimizerState

__all__ = ["Optimizer", "Adam", "AdamW", "adam_update", "default_no_decay", "param_groups"]


# ---------------------------------------------------------------------------
# The Adam update of one tensor (reference kernel)
# ---------------------------------------------------------------------------
def adam_update(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay=0.0, decoupled=False):
    r"""One Adam step for one tensor, as a pure function: new arrays out, inputs untouched.

    With :math:`\theta` = ``param``, :math:`g` = ``grad``, :math:`t` = ``step``,
    :math:`\eta` = ``lr`` and :math:`\lambda` = ``weight_decay``:

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

    This is the *reference* kernel: one formula per line, readable rather than
    fast (each line allocates a new array). :mod:`minitransformer.fast.optimizer`
    has the same function updating its inputs in place, and ``tests/fast``
    proves the two equal.

    Args:
        param: :math:`\theta_{t-1}`, a float array of any shape ``S``.
        grad: :math:`g_t`, shape ``S``.
        m: :math:`m_{t-1}`, the first-moment average, shape ``S`` (zeros before step 1).
        v: :math:`v_{t-1}`, the second-moment average, shape ``S`` (zeros before step 1).
        step: :math:`t \ge 1`, the number of this update (an int).
        lr: :math:`\eta \ge 0`, a Python float.
        beta1, beta2: :math:`\beta_1, \beta_2 \in [0, 1)`, Python floats.
        eps: :math:`\epsilon > 0`, a Python float.
        weight_decay: :math:`\lambda \ge 0`, a Python float (0 for an exempt parameter).
        decoupled: False for L2 decay inside the gradient (:class:`Adam`),
            True for decay applied to the weights directly (:class:`AdamW`).

    Returns:
        ``(param, m, v)``: :math:`\theta_t, m_t, v_t`, new arrays of shape ``S``
        and the dtype of ``param``. The scalars are Python floats so that a
        float32 tensor stays float32.
    """
    dtype = param.dtype
    if weight_decay and not decoupled:
        g = grad + weight_decay * param                      # (S) L2 decay joins the gradient
    else:
        g = grad                                             # (S) read only
    m = beta1 * m + (1.0 - beta1) * g                        # (S) m_t
    v = beta2 * v + (1.0 - beta2) * (g * g)                  # (S) v_t
    m_hat = m / (1.0 - beta1 ** step)                        # (S) bias-corrected m_t
    v_hat = v / (1.0 - beta2 ** step)                        # (S) bias-corrected v_t
    if weight_decay and decoupled:
        param = param - lr * weight_decay * param            # (S) theta', decoupled decay
    param = param - lr * m_hat / (xp.sqrt(v_hat) + eps)      # (S) theta_t
    # NumPy turns 0-d results into scalars; make them arrays of param's dtype again
    # (a no-op, no copy, for every other shape and backend).
    return (xp.asarray(param, dtype=dtype),                  # (S)
            xp.asarray(m, dtype=dtype),                      # (S)
            xp.asarray(v, dtype=dtype))                      # (S)


# ---------------------------------------------------------------------------
# The bookkeeping every optimizer shares
# ---------------------------------------------------------------------------
def is_parameter(obj) -> bool:
    """True for a Parameter-like object (it has ``data`` and ``grad``)."""
    return hasattr(obj, "data") and hasattr(obj, "grad")


def named_parameters(params) -> list[tuple[str, object]]:
    """``(name, Parameter)`` pairs from a module or from an iterable of pairs.

    Raises ``TypeError`` for bare Parameters or malformed pairs, and
    ``ValueError`` for no parameters, a repeated name, or a Parameter listed
    twice (it would be updated twice per step).
    """
    if hasattr(params, "named_parameters"):
        pairs = list(params.named_parameters())
    else:
        pairs = []
        for item in params:
            if is_parameter(item):
                raise TypeError(
                    "optimizers keep their state by parameter name: pass the model itself or "
                    "model.named_parameters(), i.e. (name, Parameter) pairs, not bare Parameters")
            name, p = item
            if not isinstance(name, str) or not is_parameter(p):
                raise TypeError(f"expected (str, Parameter) pairs, got ({type(name).__name__}, "
                                f"{type(p).__name__})")
            pairs.append((name, p))
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
    """The default weight-decay exemption: True (exempt) for parameters with
    ``ndim < 2``, i.e. biases, LayerNorm gains and shifts, and scalars.
    Matrices and embeddings (``ndim >= 2``) are decayed."""
    return param.data.ndim < 2


def _number(name: str, value) -> float:
    """``value`` as a Python float, or a ValueError naming the setting."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    return float(value)


def check_lr(value, name: str = "lr") -> float:
    """A learning rate: finite and >= 0 (0 freezes the weights; a negative rate would
    climb the loss, an infinite one turns every weight into inf or NaN)."""
    lr = _number(name, value)
    if not (math.isfinite(lr) and lr >= 0):
        raise ValueError(f"{name} must be finite and >= 0, got {value!r}")
    return lr


def check_hyperparameter(name: str, value):
    """Validate one setting of the Adam family by name (SGD's momentum: ``optim/sgd_adamax.py``);
    return it as the optimizer keeps it. Used by every constructor and by ``load_state_dict``,
    so a checkpoint cannot bring in what the constructor would refuse.
    """
    if name == "lr":
        return check_lr(value)
    if name == "weight_decay":
        wd = _number(name, value)
        if not (math.isfinite(wd) and wd >= 0):
            raise ValueError(f"weight_decay must be finite and >= 0, got {value!r}")
        return wd
    if name == "eps":
        eps = _number(name, value)
        if not (math.isfinite(eps) and eps > 0):
            raise ValueError(f"eps must be finite and > 0, got {value!r}")
        return eps
    if name == "betas":
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
            raise ValueError(f"betas must be two numbers (beta1, beta2), got {value!r}")
        b1, b2 = (_number("betas", b) for b in value)
        if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
            raise ValueError(f"betas must be in [0, 1), got {tuple(value)!r}")
        return (b1, b2)
    raise ValueError(f"unknown optimizer setting {name!r}")


class Optimizer(OptimizerState):
    r"""Shared machinery: parameters by name, step counter, lr schedule (state I/O: :class:`OptimizerState`).

    Subclasses define ``_state_keys`` (the names of the per-parameter state
    arrays, each shaped like the parameter and zero-initialised), ``_hyper``
    (the hyperparameter attributes saved in a checkpoint) and
    ``_update(name, p, state, lr)``, which updates one parameter from its
    gradient ``p.grad``: ``p.data`` and the arrays in ``state``, in place or by
    assigning new arrays (as :class:`Adam` does with :func:`adam_update`).

    Args:
        params: a module (anything with ``named_parameters()``), an iterable
            of ``(name, Parameter)`` pairs, or a list of parameter groups
            (dicts, see :mod:`minitransformer.optim.groups`).
        lr: a float, or a schedule ``t -> float`` giving the rate of step ``t``
            (the default of groups that set no ``lr``).
        weight_decay: the coefficient :math:`\lambda \ge 0`; how it enters the
            update depends on the optimizer.
        no_decay: which parameters are exempt from weight decay: ``None`` for
            :func:`default_no_decay` (exempt ``ndim < 2``), an iterable of
            names, or a predicate ``(name, Parameter) -> bool``.
    """

    _state_keys: tuple[str, ...] = ()
    _hyper: tuple[str, ...] = ("weight_decay",)
    _check_setting = staticmethod(check_hyperparameter)  # how load_state_dict (optim/state.py) checks a setting

    def __init__(self, params, lr, weight_decay: float = 0.0,
                 no_decay: Callable | Iterable[str] | None = None):
        if isinstance(params, (list, tuple)) and params and isinstance(params[0], dict):
            pairs, self.param_groups = split_groups(params, check_lr, check_hyperparameter, is_parameter)
        else:  # one collection: one group of everything, with the optimizer's settings
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
        """Names of the parameters weight decay applies to: by their group's own
        ``weight_decay`` (> 0), or else by ``no_decay`` (if ``weight_decay > 0``)."""
        own = {n: self.param_groups[i]["weight_decay"] for n, i in self._group_of.items()}
        return [n for n in self.params if (self._decay[n] if own[n] is None else own[n] > 0)]

    def weight_decay_of(self, name: str) -> float:
        """The weight-decay coefficient of one parameter: its group's, or the
        optimizer's (0 if ``no_decay`` exempts it)."""
        wd = self.param_groups[self._group_of[name]]["weight_decay"]
        return wd if wd is not None else (self.weight_decay if self._decay[name] else 0.0)

    def get_lr(self, t: int | None = None) -> float:
        """The learning rate of step ``t`` (default: the step the next ``step()`` makes)."""
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

    def step(self) -> None:
        """One update of every parameter from its current ``grad``.

        Increments ``t`` once, takes :math:`\\eta_t` from the schedule if there
        is one (in ``self.lr``; a group's own in its ``"lr"``), then updates each
        parameter that is not frozen, counting it in ``steps[name]``. A schedule
        whose rate is NaN, infinite or negative raises ``ValueError`` before anything changes.
        """
        if self.schedule is not None:  # checked before anything changes
            self.lr = self._scheduled_lr(self.t + 1)
        for g in self.param_groups:
            if g["schedule"] is not None:
                g["lr"] = self._scheduled_lr(self.t + 1, g["schedule"])
        self.t += 1
        lrs = [self.lr if g["lr"] is None else g["lr"] for g in self.param_groups]
        for name, p in self.params.items():
            if not getattr(p, "requires_grad", True):
                continue  # frozen: weights and state stay as they are
            self.steps[name] += 1
            state = self.state[name]
            for key, arr in state.items():  # the model was cast (astype) after we were built
                if arr.dtype != p.data.dtype:
                    state[key] = arr.astype(p.data.dtype)  # (*p.shape)
            self._update(name, p, state, lrs[self._group_of[name]])

    def _update(self, name: str, p, state: dict, lr: float) -> None:  # pragma: no cover
        raise NotImplementedError


# ---------------------------------------------------------------------------
# Adam and AdamW
# ---------------------------------------------------------------------------
class Adam(Optimizer):
    r"""Adam (Kingma & Ba, 2015): :func:`adam_update` with ``decoupled=False`` on
    every parameter, so L2 weight decay :math:`\lambda\theta` joins the gradient.

    It then passes through :math:`v_t`, and heavily-updated weights are decayed
    less: use :class:`AdamW` for decay independent of the gradient scale. State
    per parameter: ``{"m": m, "v": v}``, both shaped like the parameter.

    Args:
        params: a module or ``(name, Parameter)`` pairs.
        lr: float or schedule.
        betas: :math:`(\beta_1, \beta_2)`.
        eps: :math:`\epsilon > 0`.
        weight_decay: L2 coefficient :math:`\lambda`, added to the gradient.
        no_decay: exemptions from weight decay (see :class:`Optimizer`).
    """

    _state_keys = ("m", "v")
    _hyper = ("betas", "eps", "weight_decay")
    _decoupled = False  # how weight decay enters adam_update

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, no_decay=None):
        self.betas, self.eps = check_hyperparameter("betas", betas), check_hyperparameter("eps", eps)
        super().__init__(params, lr, weight_decay, no_decay)

    def _update(self, name, p, state, lr):
        (b1, b2), eps, t = self.betas, self.eps, self.steps[name]  # this parameter's update count
        wd = self.weight_decay_of(name)
        m, v = state["m"], state["v"]                  # (*p.shape) each
        if not kernels.fast:  # the reference kernel, the math of this file
            p.data, state["m"], state["v"] = adam_update(  # (*p.shape) each
                p.data, p.grad, m, v, t, lr, b1, b2, eps, wd, self._decoupled)
        else:  # the in-place twin (minitransformer/fast/optimizer.py), proven equal in tests/fast
            p.data, state["m"], state["v"] = fast_optimizer.adam_update(  # (*p.shape) each
                p.data, p.grad, m, v, t, lr, b1, b2, eps, wd, self._decoupled)


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov & Hutter, 2019): :func:`adam_update`
    with ``decoupled=True``, :math:`\theta' = \theta - \eta_t\lambda\theta` before the
    Adam step, so the decay never passes through the adaptive denominator.

    The decay is scaled by the scheduled rate :math:`\eta_t`, so it warms up and
    decays with the schedule. By default (:func:`default_no_decay`) only
    parameters with ``ndim >= 2`` are decayed; biases and LayerNorm parameters are not.

    Args:
        params, lr, betas, eps, no_decay: as for :class:`Adam`.
        weight_decay: decoupled coefficient :math:`\lambda` (default 0.01).
    """

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, no_decay=None):
        super().__init__(params, lr, betas, eps, weight_decay, no_decay)
