r"""Softmax cross-entropy with label smoothing and ignored (padding) targets, fused.

For one row of logits :math:`x \in \mathbb{R}^V` with target class :math:`t`,
the smoothed target distribution is (as in the lecture notes)

.. math:: q_t = 1-\varepsilon,\qquad q_j = \frac{\varepsilon}{V-1}\ (j\ne t),

and the loss is :math:`\ell = -\sum_j q_j \log p_j` with :math:`p=\mathrm{softmax}(x)`.
Writing :math:`\log p_j = z_j - \mathrm{lse}` (:math:`z = x - \max x`) it needs
only two numbers per row besides the log-sum-exp:

.. math:: \ell = -(1-\varepsilon)\log p_t - \frac{\varepsilon}{V-1}\Big(\sum_j \log p_j - \log p_t\Big).

Rows whose target equals ``ignore_index`` contribute nothing. With
``reduction="mean"`` the sum is divided by :math:`N`, the number of
*non-ignored* rows (not by the number of rows, which would shrink the loss of
padded batches). The fused backward never materialises the softmax Jacobian:

.. math:: \frac{\partial \ell_{\text{mean}}}{\partial x} = \frac{p - q}{N}

on kept rows, and exactly zero on ignored rows.
"""
from __future__ import annotations

from minitransformer.backend import xp
from minitransformer.functional.embedding import check_ids


def cross_entropy_forward(logits, targets, ignore_index: int | None = None,
                          label_smoothing: float = 0.0, reduction: str = "mean"):
    """Cross-entropy between ``softmax(logits)`` and (smoothed) one-hot targets.

    Args:
        logits: (..., V) unnormalised scores.
        targets: (...) integer class ids.
        ignore_index: rows whose target equals this get zero loss and zero gradient.
        label_smoothing: :math:`\\varepsilon` in [0, 1).
        reduction: ``"mean"`` (over non-ignored rows), ``"sum"``, or ``"none"``
            (per-row losses of shape (...), 0 on ignored rows).

    Returns:
        loss: 0-d array (or (...) for ``"none"``), kept on the device.
        cache: ``(p, t, weight, eps, shape)``: the softmax (N, V), the safe targets (N,),
        each row's backward weight (N,) (0 for ignored rows, 1/N for "mean"), the
        smoothing and the logits' shape.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    eps = float(label_smoothing)
    if not 0.0 <= eps < 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1), got {eps}")
    V = logits.shape[-1]
    if tuple(targets.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"cross_entropy: targets of shape {tuple(targets.shape)} do not match logits of shape "
            f"{tuple(logits.shape)}; expected targets of shape {tuple(logits.shape[:-1])}"
        )
    if eps > 0 and V < 2:
        raise ValueError("cross_entropy: label smoothing needs at least 2 classes")
    x = logits.reshape(-1, V)  # (N, V), a view
    t = targets.reshape(-1)  # (N,)
    N = t.shape[0]
    if ignore_index is None:
        keep = None
        t_safe = t
    else:
        keep = t != ignore_index  # (N,) bool
        t_safe = xp.where(keep, t, 0)  # (N,), ignored rows point at class 0 harmlessly
    check_ids(t_safe, V, "cross_entropy targets")

    rows = xp.arange(N)  # (N,)
    z = x - x.max(axis=1, keepdims=True)  # (N, V), every entry <= 0
    z_t = z[rows, t_safe]  # (N,), shifted logit of the target
    z_sum = z.sum(axis=1) if eps > 0 else None  # (N,)
    p = xp.exp(z, out=z)  # (N, V), unnormalised; reuses z's memory
    sumexp = p.sum(axis=1, keepdims=True)  # (N, 1)
    p /= sumexp  # (N, V), softmax
    lse = xp.log(sumexp[:, 0])  # (N,), log-sum-exp of z
    logp_t = z_t - lse  # (N,)
    loss_rows = -(1.0 - eps) * logp_t  # (N,)
    if eps > 0:
        sum_logp = z_sum - V * lse  # (N,), sum_j log p_j
        loss_rows -= (eps / (V - 1)) * (sum_logp - logp_t)

    if keep is None:
        weight = xp.ones(N, dtype=x.dtype)  # (N,)
    else:
        weight = keep.astype(x.dtype)  # (N,), 0 on ignored rows
        # select, not multiply: an ignored row may have an infinite loss (a -inf logit at
        # its placeholder class 0), and inf * 0 would make the whole reduction NaN
        loss_rows = xp.where(keep, loss_rows, 0.0)  # (N,)
    if reduction == "mean":
        count = weight.sum()  # 0-d, number of kept rows (stays on the device)
        denom = xp.maximum(count, 1.0)
        loss = loss_rows.sum() / denom
        weight = weight / denom  # (N,)
    elif reduction == "sum":
        loss = loss_rows.sum()
    else:
        loss = loss_rows.reshape(targets.shape)  # (...)
    return loss, (p, t_safe, weight, eps, logits.shape)


def cross_entropy_backward(cache, dloss=1.0):
    """Fused gradient ``(p - q) * weight`` with respect to the logits.

    Args:
        cache: from :func:`cross_entropy_forward`.
        dloss: upstream gradient of the loss: a scalar for "mean"/"sum", or a (...)
            array for "none".

    Returns:
        dlogits: same shape as the logits (..., V).
    """
    p, t, weight, eps, shape = cache
    N, V = p.shape
    off = eps / (V - 1) if eps > 0 else 0.0
    d = p - off  # (N, V), a fresh array: p (in the cache) stays intact for a second backward
    d[xp.arange(N), t] -= (1.0 - eps) - off  # target column: p_t - (1 - eps)
    if hasattr(dloss, "shape") and dloss.ndim > 0:
        w = weight * dloss.reshape(-1)  # (N,), "none": one upstream value per row
    else:
        w = weight * dloss  # (N,)
    w = w[:, None]  # (N, 1)
    d = xp.where(w != 0, d * w, 0.0)  # (N, V): ignored rows exactly 0 (selected, so NaN * 0 cannot leak)
    return d.reshape(shape)
