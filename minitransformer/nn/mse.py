r"""Mean squared error: the loss of a regression head.

For predictions :math:`\hat y` and targets :math:`y`, both (B, A) (B molecules, A numbers
predicted per molecule), the loss is the mean over all :math:`BA` entries

.. math:: \ell = \frac{1}{BA} \sum_{b,a} (\hat y_{ba} - y_{ba})^2,
          \qquad \frac{\partial \ell}{\partial \hat y_{ba}} = \frac{2}{BA} (\hat y_{ba} - y_{ba}).

A head that predicts a constant 0 for targets of mean 0 and variance 1 scores
:math:`\ell = 1`: targets put on unit variance make the loss read as the share of their
variance left unexplained, and put it on the scale of a cross-entropy beside it.
The targets are data: they get no gradient.
"""
from __future__ import annotations

from typing import NamedTuple


class MSECache(NamedTuple):
    """What :func:`mse_backward` needs."""

    diff: object  # (B, A) prediction - target
    n: int  # B * A, the entries averaged over


def mse_forward(pred, target):
    """Mean squared error of ``pred`` against ``target``, both (B, A) on one device.

    Returns:
        loss: 0-d array, kept on the device. cache: :class:`MSECache`.
    """
    if pred.shape != target.shape or pred.ndim != 2 or pred.size == 0:
        raise ValueError(f"mse_forward: predictions of shape {tuple(pred.shape)} and targets of shape "
                         f"{tuple(target.shape)}; give two (B, A) arrays of one shape, B, A >= 1")
    diff = pred - target.astype(pred.dtype, copy=False)  # (B, A)
    loss = (diff * diff).mean()  # ()
    return loss, MSECache(diff, diff.size)


def mse_backward(dloss, cache: MSECache):
    """Gradient with respect to the predictions: (B, A), ``dloss * 2 (pred - target) / (B A)``."""
    return cache.diff * (2.0 * float(dloss) / cache.n)  # (B, A)
