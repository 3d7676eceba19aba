r"""Softmax, and the cross-entropy loss built on it.

.. math:: p_i = \frac{e^{x_i - m}}{\sum_j e^{x_j - m}},\quad m = \max_j x_j

(every exponent :math:`\le 0`: no overflow). A row of all :math:`-\infty` gives zeros,
not the NaN of :math:`0/0`. The backward never forms the Jacobian
:math:`\mathrm{diag}(p) - pp^\top`:

.. math:: dx = p \odot \Big(dp - \textstyle\sum_j dp_j\,p_j\Big).

**Cross-entropy** with label smoothing :math:`\varepsilon`, for logits
:math:`x \in \mathbb{R}^V` and target :math:`t`: :math:`q_t = 1-\varepsilon`,
:math:`q_j = \varepsilon/(V-1)` otherwise, and with :math:`\log p = x - \mathrm{lse}(x)`

.. math:: \ell = -\sum_j q_j \log p_j
          = -(1-\varepsilon)\log p_t - \frac{\varepsilon}{V-1}\Big(\sum_j \log p_j - \log p_t\Big).

Rows whose target is ``ignore_index`` (padding) count for nothing; the mean divides
by :math:`N`, the *kept* rows (all rows would shrink a padded batch's loss). Backward:

.. math:: \frac{\partial \ell_{\text{mean}}}{\partial x} = \frac{p - q}{N}
          \ \text{on kept rows, exactly } 0 \text{ on ignored rows}.
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer import kernels
from minitransformer.backend import check_cross_entropy_args, check_ids, xp
from minitransformer.fast import softmax as fast_softmax
from minitransformer.nn.module import Module


class SoftmaxCache(NamedTuple):
    """What :func:`softmax_backward` needs."""

    p: object  # (...) the softmax output
    axis: int  # the softmax axis


def softmax_forward(x, axis: int = -1):
    """x (...) -> p (...), softmax along ``axis``, and a :class:`SoftmaxCache`."""
    m = x.max(axis=axis, keepdims=True)  # (..., 1, ...) the row maximum
    m = xp.where(xp.isneginf(m), 0.0, m)  # (..., 1, ...) an all -inf row: shift by 0, not -inf
    e = xp.exp(x - m)  # (...) every exponent <= 0; exp(-inf) = 0 exactly
    total = e.sum(axis=axis, keepdims=True)  # (..., 1, ...) 0 only on an all -inf row
    p = e / xp.where(total == 0, 1.0, total)  # (...) that row: 0 / 1 = 0
    return p, SoftmaxCache(p, axis)


def softmax_backward(dp, cache: SoftmaxCache):
    """dp (...) -> dx (...), along the softmax axis."""
    p, axis = cache
    inner = (dp * p).sum(axis=axis, keepdims=True)  # (..., 1, ...) one number per row
    return p * (dp - inner)  # (...)


def log_softmax(x, axis: int = -1):
    """x (...) -> ``x - m - log sum exp(x - m)`` along ``axis``. Forward only."""
    z = x - x.max(axis=axis, keepdims=True)  # (...) every entry <= 0
    return z - xp.log(xp.exp(z).sum(axis=axis, keepdims=True))  # (...)


class CrossEntropyCache(NamedTuple):
    """What :func:`cross_entropy_backward` needs."""

    p: object  # (N, V) softmax(logits)
    targets: object  # (N,) target ids (0 on ignored rows)
    weight: object  # (N,) each row's share of the loss: 0 if ignored, 1/N for "mean"
    smoothing: float  # epsilon
    shape: tuple  # the logits' shape (..., V)


def cross_entropy_forward(logits, targets, ignore_index: int | None = None,
                          label_smoothing: float = 0.0, reduction: str = "mean"):
    """logits (..., V), targets (...) ids -> loss (0-d, or (...) for "none") and a cache."""
    eps = check_cross_entropy_args(logits, targets, label_smoothing, reduction)
    V = logits.shape[-1]
    x = logits.reshape(-1, V)  # (N, V)
    t = targets.reshape(-1)  # (N,)
    N = t.shape[0]
    keep = xp.ones(N, dtype=bool) if ignore_index is None else t != ignore_index  # (N,) bool
    t = xp.where(keep, t, 0)  # (N,) ignored rows point at class 0, harmlessly
    check_ids(t, V, "cross_entropy targets")
    logp = log_softmax(x, axis=1)  # (N, V)
    logp_t = logp[xp.arange(N), t]  # (N,) log-probability of the target
    loss_rows = -(1.0 - eps) * logp_t  # (N,)
    if eps > 0:  # (a separate branch: with eps = 0 a -inf logit would give 0 * -inf = NaN)
        loss_rows = loss_rows - (eps / (V - 1)) * (logp.sum(axis=1) - logp_t)  # (N,)
    loss_rows = xp.where(keep, loss_rows, 0.0)  # (N,) select, not multiply: inf * 0 is NaN
    weight = keep.astype(x.dtype)  # (N,) 1 on kept rows, 0 on ignored rows
    if reduction == "mean":
        n_kept = xp.maximum(weight.sum(), 1.0)  # 0-d, stays on the device
        loss = loss_rows.sum() / n_kept
        weight = weight / n_kept  # (N,)
    elif reduction == "sum":
        loss = loss_rows.sum()
    else:
        loss = loss_rows.reshape(targets.shape)  # (...)
    return loss, CrossEntropyCache(xp.exp(logp), t, weight, eps, tuple(logits.shape))


def cross_entropy_backward(dloss, cache: CrossEntropyCache):
    """dloss (a scalar, or (...) for "none") -> dlogits (..., V) = (p - q) * weight * dloss."""
    p, t, weight, eps, shape = cache
    N, V = p.shape
    q = xp.full((N, V), eps / (V - 1) if eps > 0 else 0.0, dtype=p.dtype)  # (N, V) smoothed targets
    q[xp.arange(N), t] = 1.0 - eps
    dloss = dloss.reshape(-1) if getattr(dloss, "ndim", 0) > 0 else dloss  # (N,) for "none"
    w = (weight * dloss)[:, None]  # (N, 1) each row's factor
    dx = xp.where(w != 0, (p - q) * w, 0.0)  # (N, V) ignored rows exactly 0, even if p holds NaN
    return dx.reshape(shape)


class CrossEntropyLoss(Module):
    """The loss as a layer: ``loss = ce(logits, targets)``, then ``dlogits = ce.backward()``."""

    def __init__(self, ignore_index: int | None = None, label_smoothing: float = 0.0, reduction: str = "mean"):
        self.ignore_index, self.label_smoothing, self.reduction = ignore_index, label_smoothing, reduction

    def forward(self, logits, targets):
        """logits (..., V), targets (...) ids -> the loss."""
        options = dict(ignore_index=self.ignore_index, label_smoothing=self.label_smoothing,
                       reduction=self.reduction)
        if not kernels.fast:  # the reference kernel, the math of this file
            loss, self.cache = cross_entropy_forward(logits, targets, **options)
        else:  # the fused twin (minitransformer/fast/softmax.py)
            loss, self.cache = fast_softmax.cross_entropy_forward(logits, targets, **options)
        return loss

    def backward(self, dloss=1.0):
        """dloss (a scalar, or (...) for "none") -> dlogits (..., V)."""
        cache = self._require_cache()
        if isinstance(cache, fast_softmax.FastCrossEntropyCache):  # the set that made the cache
            return fast_softmax.cross_entropy_backward(dloss, cache)
        return cross_entropy_backward(dloss, cache)
