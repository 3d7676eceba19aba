r"""Optimizers, learning-rate schedules and gradient clipping.

An optimizer turns the gradients that the backward passes left in
``Parameter.grad`` into an update of ``Parameter.data``. Everything here works
in place on the arrays of the active backend (NumPy, CuPy or the strict
stand-in) and keeps their dtype: a float32 model stays float32, because every
scalar that meets an array (learning rate, betas, bias corrections) is a plain
Python float.

Notation used in the docstrings, for one parameter tensor :math:`\theta` (any
shape) at optimizer step :math:`t = 1, 2, \dots`:

* :math:`g_t = \nabla_\theta L` is ``p.grad`` (same shape as ``p.data``),
* :math:`\eta_t` is the learning rate of step :math:`t` (a constant, or the
  value of a schedule at :math:`t`),
* :math:`\lambda` is the weight-decay coefficient,
* products, squares, divisions and :math:`\max` of tensors are element-wise.

**Parameters are addressed by name.** An optimizer is built from a module (any
object with ``named_parameters()``) or from ``(name, Parameter)`` pairs, and
keeps its per-parameter state in ``optimizer.state[name]``, a dict of arrays
shaped like the parameter. Names make :meth:`Optimizer.state_dict` readable
and let :meth:`Optimizer.load_state_dict` say exactly which tensor does not fit.

**The step counter.** ``optimizer.t`` counts calls to :meth:`Optimizer.step`:
it is incremented once at the start of each call, so during the first update
:math:`t = 1`, and every parameter of that update sees the same :math:`t`.
(Incrementing it inside the per-parameter loop is a classic bug: with
:math:`P` parameters the bias corrections would then run :math:`P` times too
fast.)

**Learning-rate schedules.** ``lr`` is either a float or a *schedule*: any
callable ``schedule(t) -> float`` that returns the learning rate itself (not a
multiplier) for step ``t``; :class:`Schedule` and its subclasses are such
callables. ``optimizer.schedule`` holds it (``None`` for a constant rate), and
``optimizer.lr`` always holds a float: the constant rate, or with a schedule
the rate used by the latest step (before the first step, the rate of step 1).
So ``optimizer.lr`` is what a training log should print.

**Weight decay** applies only to parameters that are not exempt. The ``no_decay``
argument decides which are exempt; its default, :func:`default_no_decay`,
exempts every parameter with fewer than two dimensions (biases, LayerNorm gains
and shifts, scalars) and decays the matrices (linear weights, embeddings). Pass
``no_decay=()`` to decay everything, a list of names, or a predicate
``(name, Parameter) -> bool``. ``optimizer.decayed_names()`` lists the result.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Callable, Iterable

import numpy as np  # host-side copies for state_dict / load_state_dict only

from minitransformer import backend
from minitransformer.backend import xp

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "Adamax",
    "Schedule", "ConstantLR", "NoamLR", "WarmupCosineLR", "clip_grad_norm_on_device",
    "clip_grad_norm", "default_no_decay",
]


# ---------------------------------------------------------------------------
# Learning-rate schedules
# ---------------------------------------------------------------------------
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


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def default_no_decay(name: str, param) -> bool:
    """The default weight-decay exemption: True (exempt) for parameters with
    ``ndim < 2``, i.e. biases, LayerNorm gains and shifts, and scalars.
    Matrices and embeddings (``ndim >= 2``) are decayed."""
    return param.data.ndim < 2


def _is_parameter(obj) -> bool:
    return hasattr(obj, "data") and hasattr(obj, "grad")


def _named_parameters(params) -> list[tuple[str, object]]:
    """``(name, Parameter)`` pairs from a module or from an iterable of pairs."""
    if hasattr(params, "named_parameters"):
        pairs = list(params.named_parameters())
    else:
        pairs = []
        for item in params:
            if _is_parameter(item):
                raise TypeError(
                    "optimizers keep their state by parameter name: pass the model itself or "
                    "model.named_parameters(), i.e. (name, Parameter) pairs, not bare Parameters")
            name, p = item
            if not isinstance(name, str) or not _is_parameter(p):
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


def _parameter_list(params) -> list:
    """Parameters (each once) from a module, Parameters, or (name, Parameter) pairs."""
    items = params.parameters() if hasattr(params, "parameters") else params
    out, seen = [], set()
    for item in items:
        p = item if _is_parameter(item) else item[1]
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


# ---------------------------------------------------------------------------
# Gradient clipping
# ---------------------------------------------------------------------------
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
    plist = _parameter_list(params)
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
    plist = _parameter_list(params)
    total = _grad_norm_squared(plist)            # () on the device
    norm = xp.sqrt(total)                        # ()
    scale = xp.ones_like(norm) if max_norm is None else xp.minimum(1.0, max_norm / (norm + 1e-6))  # ()
    scale = xp.where(xp.isfinite(norm), scale, 0.0)  # ()
    for p in plist:
        p.grad *= scale.astype(p.grad.dtype)
    return norm

# ---------------------------------------------------------------------------
# Optimizers
# ---------------------------------------------------------------------------
def _check_betas_eps(betas, eps) -> tuple[tuple[float, float], float]:
    """Validate Adam-family hyperparameters; return them as Python floats."""
    b1, b2 = (float(b) for b in betas)
    if not (0.0 <= b1 < 1.0 and 0.0 <= b2 < 1.0):
        raise ValueError(f"betas must be in [0, 1), got {betas}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    return (b1, b2), float(eps)


class Optimizer:
    r"""Shared machinery: parameters by name, step counter, lr schedule, state I/O.

    Subclasses define ``_state_keys`` (the names of the per-parameter state
    arrays, each shaped like the parameter and zero-initialised), ``_hyper``
    (the hyperparameter attributes saved in a checkpoint) and
    ``_update(name, p, state, lr)``, which changes ``p.data`` in place for one
    parameter using the gradient ``p.grad``.

    Args:
        params: a module (anything with ``named_parameters()``) or an iterable
            of ``(name, Parameter)`` pairs.
        lr: a float, or a schedule ``t -> float`` giving the rate of step ``t``.
        weight_decay: the coefficient :math:`\lambda \ge 0`; how it enters the
            update depends on the optimizer.
        no_decay: which parameters are exempt from weight decay: ``None`` for
            :func:`default_no_decay` (exempt ``ndim < 2``), an iterable of
            names, or a predicate ``(name, Parameter) -> bool``.
    """

    _state_keys: tuple[str, ...] = ()
    _hyper: tuple[str, ...] = ("weight_decay",)

    def __init__(self, params, lr, weight_decay: float = 0.0,
                 no_decay: Callable | Iterable[str] | None = None):
        self.params: dict[str, object] = dict(_named_parameters(params))
        if callable(lr):
            self.schedule = lr
            self.lr = float(lr(1))
        else:
            if not lr >= 0:
                raise ValueError(f"lr must be >= 0, got {lr}")
            self.schedule = None
            self.lr = float(lr)
        if not weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        self.weight_decay = float(weight_decay)
        self._decay = self._resolve_no_decay(no_decay)
        self.t = 0
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
        """Names of the parameters weight decay applies to (if ``weight_decay > 0``)."""
        return [n for n, d in self._decay.items() if d]

    def get_lr(self, t: int | None = None) -> float:
        """The learning rate of step ``t`` (default: the step the next ``step()`` makes)."""
        if self.schedule is None:
            return self.lr
        return float(self.schedule(self.t + 1 if t is None else t))

    def zero_grad(self) -> None:
        """Set every gradient to zero (backward passes accumulate with ``+=``)."""
        for p in self.params.values():
            p.grad.fill(0)

    def step(self) -> None:
        """One update of every parameter from its current ``grad``.

        Increments ``t`` once, takes :math:`\\eta_t` from the schedule if there
        is one (storing it in ``self.lr``), then updates each parameter.
        """
        self.t += 1
        if self.schedule is not None:
            self.lr = float(self.schedule(self.t))
        lr = self.lr
        for name, p in self.params.items():
            state = self.state[name]
            for key, arr in state.items():  # the model was cast (astype) after we were built
                if arr.dtype != p.data.dtype:
                    state[key] = arr.astype(p.data.dtype)  # (*p.shape)
            self._update(name, p, state, lr)

    def _update(self, name: str, p, state: dict, lr: float) -> None:  # pragma: no cover
        raise NotImplementedError

    def _l2_grad(self, name: str, p):
        r"""The gradient with L2 regularisation folded in, :math:`g + \lambda\theta`.

        Returns ``p.grad`` itself when there is no decay for this parameter, so
        callers must not write into the result.
        """
        if self.weight_decay and self._decay[name]:
            return p.grad + self.weight_decay * p.data  # (*p.shape) new array
        return p.grad

    # -- checkpoints -------------------------------------------------------
    def state_dict(self) -> dict:
        """Everything needed to resume, as plain Python values and host NumPy arrays.

        ``{"type": class name, "t": int, "lr": float, <hyperparameters>,
        "schedule": repr or None, "state": {name: {key: numpy.ndarray}}}``.
        The arrays are copies, so later steps do not change a saved dict. The
        schedule itself is not saved (it is a pure function of ``t``); its repr
        is kept for the record.
        """
        sd = {"type": type(self).__name__, "t": int(self.t), "lr": float(self.lr)}
        for key in self._hyper:
            value = getattr(self, key)
            sd[key] = list(value) if isinstance(value, tuple) else value
        sd["schedule"] = None if self.schedule is None else repr(self.schedule)
        sd["state"] = {
            name: {key: np.array(backend.to_numpy(arr), copy=True) for key, arr in st.items()}
            for name, st in self.state.items()
        }
        return sd

    def load_state_dict(self, sd: dict) -> None:
        """Restore ``t``, ``lr``, the hyperparameters and the per-parameter state.

        Everything is checked first (optimizer type, parameter names, state
        keys, shapes); on any mismatch a ``ValueError`` lists all of them and
        nothing is loaded. Arrays are copied to the active backend and cast to
        each parameter's dtype. The schedule is kept as constructed.
        """
        problems = []
        if sd.get("type", type(self).__name__) != type(self).__name__:
            problems.append(f"optimizer type: expected {type(self).__name__}, got {sd['type']}")
        state = sd.get("state", {})
        missing = sorted(set(self.params) - set(state))
        unexpected = sorted(set(state) - set(self.params))
        if missing:
            problems.append("missing: " + ", ".join(missing))
        if unexpected:
            problems.append("unexpected: " + ", ".join(unexpected))
        for name, p in self.params.items():
            if name not in state:
                continue
            keys, want = sorted(state[name]), sorted(self._state_keys)
            if keys != want:
                problems.append(f"{name}: state keys {keys}, expected {want}")
                continue
            for key in want:
                shape = tuple(np.shape(state[name][key]))
                if shape != tuple(p.data.shape):
                    problems.append(f"{name}.{key}: shape {shape}, expected {tuple(p.data.shape)}")
        if problems:
            raise ValueError(f"optimizer state dict does not fit this {type(self).__name__}:\n  "
                             + "\n  ".join(problems))
        for name, p in self.params.items():
            self.state[name] = {
                key: backend.asarray(np.array(backend.to_numpy(arr), dtype=p.data.dtype,
                                              copy=True))  # (*p.shape)
                for key, arr in state[name].items()
            }
        self.t = int(sd["t"])
        self.lr = float(sd.get("lr", self.lr))
        for key in self._hyper:
            if key in sd:
                current = getattr(self, key)
                value = sd[key]
                setattr(self, key, tuple(float(v) for v in value) if isinstance(current, tuple)
                        else type(current)(value))

    def __repr__(self) -> str:
        hyper = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._hyper)
        lr = repr(self.schedule) if self.schedule is not None else repr(self.lr)
        return f"{type(self).__name__}({len(self.params)} parameters, lr={lr}, {hyper}, t={self.t})"


class SGD(Optimizer):
    r"""Stochastic gradient descent, optionally with (Nesterov) momentum.

    With L2 weight decay :math:`\lambda` (on non-exempt parameters) and
    momentum :math:`\mu`, one step is

    .. math::

        \tilde g_t &= g_t + \lambda \theta_{t-1} \\
        b_t &= \mu\, b_{t-1} + \tilde g_t, \qquad b_0 = 0 \\
        d_t &= \begin{cases} \tilde g_t + \mu\, b_t & \text{Nesterov} \\
                             b_t & \text{otherwise} \end{cases} \\
        \theta_t &= \theta_{t-1} - \eta_t\, d_t

    With :math:`\mu = 0` this is plain SGD, :math:`\theta_t = \theta_{t-1} -
    \eta_t \tilde g_t`, and no state is kept. Otherwise the state of each
    parameter is ``{"momentum": b}`` (shape of the parameter).

    Args:
        params: a module or ``(name, Parameter)`` pairs.
        lr: float or schedule.
        momentum: :math:`\mu \in [0, 1)`.
        nesterov: use the Nesterov look-ahead (needs ``momentum > 0``).
        weight_decay: L2 coefficient :math:`\lambda`, added to the gradient.
        no_decay: exemptions from weight decay (see :class:`Optimizer`).
    """

    _hyper = ("momentum", "nesterov", "weight_decay")

    def __init__(self, params, lr, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, no_decay=None):
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {momentum}")
        if nesterov and momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0")
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)
        self._state_keys = ("momentum",) if momentum > 0 else ()
        super().__init__(params, lr, weight_decay, no_decay)

    def load_state_dict(self, sd: dict) -> None:
        if "momentum" in sd and (float(sd["momentum"]) > 0) != (self.momentum > 0):
            raise ValueError(f"optimizer state dict does not fit this SGD: it was saved with "
                             f"momentum={sd['momentum']}, this one has momentum={self.momentum}")
        super().load_state_dict(sd)

    def _update(self, name, p, state, lr):
        g = self._l2_grad(name, p)                     # (*p.shape)
        if self.momentum == 0:
            p.data -= lr * g                           # (*p.shape) temporary
            return
        b = state["momentum"]                          # (*p.shape)
        b *= self.momentum
        b += g
        d = g + self.momentum * b if self.nesterov else b   # (*p.shape)
        p.data -= lr * d                               # (*p.shape) temporary


class Adam(Optimizer):
    r"""Adam (Kingma & Ba, 2015), with optional L2 weight decay in the gradient.

    With :math:`\beta_1, \beta_2 \in [0, 1)` and :math:`m_0 = v_0 = 0`:

    .. math::

        \tilde g_t &= g_t + \lambda \theta_{t-1} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1)\, \tilde g_t \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2)\, \tilde g_t^2 \\
        \theta_t &= \theta_{t-1} - \frac{\eta_t}{1 - \beta_1^t}\,
                    \frac{m_t}{\sqrt{v_t} / \sqrt{1 - \beta_2^t} + \epsilon}

    The factors :math:`1/(1-\beta^t)` undo the bias of the zero-initialised
    averages (with :math:`\beta_2 = 0.999`, :math:`v_1` is only
    :math:`0.001\, g_1^2`). Note :math:`\epsilon` is added *after* the bias
    correction of :math:`\sqrt{v_t}`. Because :math:`\lambda\theta` passes
    through :math:`v_t`, heavily-updated weights are decayed less: use
    :class:`AdamW` for decay that is independent of the gradient scale.

    State per parameter: ``{"m": m, "v": v}``, both shaped like the parameter.

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

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, no_decay=None):
        self.betas, self.eps = _check_betas_eps(betas, eps)
        super().__init__(params, lr, weight_decay, no_decay)

    def _decoupled_decay(self, name, p, lr) -> None:
        """Hook for AdamW; Adam puts its decay into the gradient instead."""

    def _grad(self, name, p):
        return self._l2_grad(name, p)

    def _update(self, name, p, state, lr):
        b1, b2 = self.betas
        bc1 = 1.0 - b1 ** self.t                       # Python floats: no float64 upcast
        bc2 = 1.0 - b2 ** self.t
        self._decoupled_decay(name, p, lr)
        g = self._grad(name, p)                        # (*p.shape)
        m, v = state["m"], state["v"]                  # (*p.shape) each
        buf = xp.empty_like(m)                         # (*p.shape) the one scratch array
        xp.multiply(g, 1.0 - b1, out=buf)              # (out=: 0-d results stay arrays)
        m *= b1
        m += buf                                       # m_t
        xp.multiply(g, g, out=buf)
        buf *= 1.0 - b2
        v *= b2
        v += buf                                       # v_t
        xp.sqrt(v, out=buf)
        buf /= math.sqrt(bc2)
        buf += self.eps                                # denominator
        xp.divide(m, buf, out=buf)
        buf *= lr / bc1                                # the step
        p.data -= buf


class AdamW(Adam):
    r"""Adam with decoupled weight decay (Loshchilov & Hutter, 2019).

    The decay shrinks the weights directly instead of entering the gradient,
    so it does not pass through the adaptive denominator:

    .. math::

        \theta' &= \theta_{t-1} - \eta_t \lambda\, \theta_{t-1}
                   \quad \text{(non-exempt parameters only)} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1)\, g_t \\
        v_t &= \beta_2 v_{t-1} + (1 - \beta_2)\, g_t^2 \\
        \theta_t &= \theta' - \frac{\eta_t}{1 - \beta_1^t}\,
                    \frac{m_t}{\sqrt{v_t} / \sqrt{1 - \beta_2^t} + \epsilon}

    The decay is scaled by the scheduled rate :math:`\eta_t`, so it warms up
    and decays with the schedule. By default (:func:`default_no_decay`) only
    parameters with ``ndim >= 2`` are decayed; biases and LayerNorm
    parameters are not.

    Args:
        params, lr, betas, eps, no_decay: as for :class:`Adam`.
        weight_decay: decoupled coefficient :math:`\lambda` (default 0.01).
    """

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.01, no_decay=None):
        super().__init__(params, lr, betas, eps, weight_decay, no_decay)

    def _decoupled_decay(self, name, p, lr):
        if self.weight_decay and self._decay[name]:
            p.data *= 1.0 - lr * self.weight_decay

    def _grad(self, name, p):
        return p.grad


class Adamax(Optimizer):
    r"""Adamax, the infinity-norm variant of Adam (Kingma & Ba, 2015, sec. 7.1).

    The second moment is replaced by an exponentially weighted maximum of
    :math:`|g|`, which needs no bias correction; with :math:`m_0 = u_0 = 0`:

    .. math::

        \tilde g_t &= g_t + \lambda \theta_{t-1} \\
        m_t &= \beta_1 m_{t-1} + (1 - \beta_1)\, \tilde g_t \\
        u_t &= \max\!\left(\beta_2 u_{t-1},\, |\tilde g_t|\right) \\
        \theta_t &= \theta_{t-1} - \frac{\eta_t}{1 - \beta_1^t}\,
                    \frac{m_t}{u_t + \epsilon}

    The step of each coordinate is bounded by about :math:`\eta_t` in size.
    The paper's default rate is :math:`\eta = 2 \cdot 10^{-3}`.

    State per parameter: ``{"m": m, "u": u}``, both shaped like the parameter.

    Args:
        params: a module or ``(name, Parameter)`` pairs.
        lr: float or schedule (default 2e-3).
        betas: :math:`(\beta_1, \beta_2)`.
        eps: :math:`\epsilon > 0`.
        weight_decay: L2 coefficient :math:`\lambda`, added to the gradient.
        no_decay: exemptions from weight decay (see :class:`Optimizer`).
    """

    _state_keys = ("m", "u")
    _hyper = ("betas", "eps", "weight_decay")

    def __init__(self, params, lr: float = 2e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, no_decay=None):
        self.betas, self.eps = _check_betas_eps(betas, eps)
        super().__init__(params, lr, weight_decay, no_decay)

    def _update(self, name, p, state, lr):
        b1, b2 = self.betas
        bc1 = 1.0 - b1 ** self.t
        g = self._l2_grad(name, p)                     # (*p.shape)
        m, u = state["m"], state["u"]                  # (*p.shape) each
        buf = xp.empty_like(m)                         # (*p.shape) the one scratch array
        xp.multiply(g, 1.0 - b1, out=buf)              # (out=: 0-d results stay arrays)
        m *= b1
        m += buf                                       # m_t
        xp.abs(g, out=buf)
        u *= b2
        xp.maximum(u, buf, out=u)                      # u_t
        xp.add(u, self.eps, out=buf)
        xp.divide(m, buf, out=buf)
        buf *= lr / bc1
        p.data -= buf
