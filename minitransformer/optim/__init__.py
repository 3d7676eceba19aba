r"""Optimizers, learning-rate schedules and gradient clipping.

The package has one module per job:

* :mod:`~minitransformer.optim.schedules`: :class:`Schedule`, :class:`ConstantLR`,
  :class:`NoamLR`, :class:`WarmupCosineLR`, the learning rate as a function of
  the step;
* :mod:`~minitransformer.optim.clip`: :func:`clip_grad_norm`, which caps the
  global L2 norm of all gradients;
* :mod:`~minitransformer.optim.optimizer`: the :class:`Optimizer` base class,
  the reference Adam update :func:`~minitransformer.optim.optimizer.adam_update`,
  :class:`Adam` and :class:`AdamW`;
* :mod:`~minitransformer.optim.groups`: parameter groups (per-group ``lr`` and
  ``weight_decay``) and :func:`param_groups`, the decay / no-decay split;
* :mod:`~minitransformer.optim.state`: :class:`~minitransformer.optim.state.OptimizerState`,
  the mixin that gives every optimizer ``state_dict`` and ``load_state_dict``;
* :mod:`~minitransformer.optim.sgd_adamax`: :class:`SGD` and :class:`Adamax`;
* :mod:`~minitransformer.optim.memory`: where an optimizer's tensors live (their own arrays,
  or the flat buffers the fast set lays out), for code that works on all of them at once.

Everything is re-exported here, so ``from minitransformer.optim import AdamW,
WarmupCosineLR, clip_grad_norm`` is all a training script needs.

Notation used in the docstrings, for one parameter tensor :math:`\theta` (any
shape) at optimizer step :math:`t = 1, 2, \dots`:

* :math:`g_t = \nabla_\theta L` is ``p.grad`` (same shape as ``p.data``),
* :math:`\eta_t` is the learning rate of step :math:`t` (a constant, or the
  value of a schedule at :math:`t`),
* :math:`\lambda` is the weight-decay coefficient,
* products, squares, divisions and :math:`\max` of tensors are element-wise.
"""
from minitransformer.optim.clip import clip_grad_norm, clip_grad_norm_on_device
from minitransformer.optim.groups import param_groups
from minitransformer.optim.optimizer import Adam, AdamW, Optimizer, default_no_decay
from minitransformer.optim.schedules import ConstantLR, NoamLR, Schedule, WarmupCosineLR
from minitransformer.optim.sgd_adamax import SGD, Adamax

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "Adamax",
    "Schedule", "ConstantLR", "NoamLR", "WarmupCosineLR", "clip_grad_norm_on_device",
    "clip_grad_norm", "default_no_decay", "param_groups",
]
