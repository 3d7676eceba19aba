r"""SGD (with optional momentum) and Adamax, on the shared :class:`Optimizer` base.

Both update the parameters in place, one array operation per line, with the
notation of :mod:`minitransformer.optim`. Their weight decay is L2 decay, added
to the gradient, and only for parameters that are not exempt (see
:class:`~minitransformer.optim.optimizer.Optimizer`).
"""
from __future__ import annotations

import numpy as np  # the number types a setting may have

from minitransformer.backend import xp
from minitransformer.optim.optimizer import Optimizer, as_number, check_hyperparameter

__all__ = ["SGD", "Adamax"]


def check_sgd_setting(name: str, value):
    """SGD's own settings, ``momentum`` in [0, 1) and ``nesterov`` (a bool), then the shared ones."""
    if name == "momentum":
        mu = as_number(name, value)
        if not 0.0 <= mu < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {value!r}")
        return mu
    if name == "nesterov":
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"nesterov must be True or False, got {value!r}")
        return bool(value)
    return check_hyperparameter(name, value)


def _l2_grad(opt: Optimizer, name: str, p):
    r"""The gradient with L2 regularisation folded in, :math:`g + \lambda\theta`
    (:math:`\lambda` = ``opt.weight_decay_of(name)``).

    Returns ``p.grad`` itself when there is no decay for this parameter, so
    callers must not write into the result.
    """
    wd = opt.weight_decay_of(name)
    return p.grad + wd * p.data if wd else p.grad  # (*p.shape)


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
    _check_setting = staticmethod(check_sgd_setting)  # momentum and nesterov, then the shared settings

    def __init__(self, params, lr, momentum: float = 0.0, nesterov: bool = False,
                 weight_decay: float = 0.0, no_decay=None):
        momentum = check_sgd_setting("momentum", momentum)
        nesterov = check_sgd_setting("nesterov", nesterov)
        if nesterov and momentum == 0:
            raise ValueError("nesterov=True needs momentum > 0")
        self.momentum = momentum
        self.nesterov = nesterov
        self._state_keys = ("momentum",) if momentum > 0 else ()
        super().__init__(params, lr, weight_decay, no_decay)

    def load_state_dict(self, sd: dict) -> None:
        if "momentum" in sd and (check_sgd_setting("momentum", sd["momentum"]) > 0) != (self.momentum > 0):
            raise ValueError(f"optimizer state dict does not fit this SGD: it was saved with "
                             f"momentum={sd['momentum']}, this one has momentum={self.momentum}")
        super().load_state_dict(sd)

    def _update(self, name, p, state, lr):
        g = _l2_grad(self, name, p)                    # (*p.shape)
        if self.momentum == 0:
            p.data -= lr * g                           # (*p.shape) temporary
            return
        b = state["momentum"]                          # (*p.shape)
        b *= self.momentum
        b += g
        d = g + self.momentum * b if self.nesterov else b   # (*p.shape)
        p.data -= lr * d                               # (*p.shape) temporary



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
        self.betas, self.eps = check_hyperparameter("betas", betas), check_hyperparameter("eps", eps)
        super().__init__(params, lr, weight_decay, no_decay)

    def _update(self, name, p, state, lr):
        b1, b2 = self.betas
        bc1 = 1.0 - b1 ** self.steps[name]             # this parameter's update count
        g = _l2_grad(self, name, p)                    # (*p.shape)
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
