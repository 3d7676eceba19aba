r"""Sigmoid binary cross-entropy for multi-label targets with missing labels, fused.

Each of the :math:`K` labels of a sample is its own yes/no question (a Tox21
assay, say), answered by one logit :math:`z` through :math:`\sigma(z) = 1/(1+e^{-z})`.
For a target :math:`y \in [0, 1]` (usually 0 or 1) and an optional weight
:math:`w^+ \ge 0` on the positive class, the loss of one entry is

.. math:: \ell = -w^+ y\log\sigma(z) - (1-y)\log\big(1-\sigma(z)\big)
               = w^+ y\,\mathrm{sp}(-z) + (1-y)\,\mathrm{sp}(z),

with the softplus :math:`\mathrm{sp}(z) = \log(1+e^z)`, because
:math:`-\log\sigma(z) = \mathrm{sp}(-z)` and :math:`-\log(1-\sigma(z)) = \mathrm{sp}(z)`.
Without a weight (:math:`w^+ = 1`) this is the familiar
:math:`\mathrm{sp}(z) - yz`, since :math:`\mathrm{sp}(z) - \mathrm{sp}(-z) = z`.
Both softplus terms are evaluated as

.. math:: \mathrm{sp}(\pm z) = \max(\pm z, 0) + \log\!\big(1 + e^{-|z|}\big),

which never exponentiates a positive number, so it is finite for any finite
:math:`z` (:math:`|z| = 10^4` included) and loses no precision in either tail.

Labels can be missing (an assay that was not run on a molecule). An entry is
*present* when ``mask`` is true there (``mask=None``: everywhere) **and** its
target is not NaN; either way of marking a missing label works, and both may be
combined. Missing entries contribute exactly 0 to the loss and get exactly 0
gradient, whatever their logit or target holds (inf, NaN, a placeholder such
as -1): they are *selected* away with ``where``, never multiplied by 0. With
``reduction="mean"`` the sum is divided by :math:`n`, the number of present
entries (clamped to at least 1, so a batch without any label gives loss 0 and
gradient 0). The fused backward is

.. math:: \frac{\partial \ell}{\partial z} = (1-y)\,\sigma(z) - w^+ y\,\sigma(-z),
          \qquad\text{which is } \sigma(z) - y \text{ for } w^+ = 1,

divided by :math:`n` for the mean, and exactly zero on missing entries.
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer import backend
from minitransformer.backend import xp


class BCECache(NamedTuple):
    """What :func:`masked_bce_backward` needs."""

    z: object  # (B, K) the logits, 0 on missing entries
    y: object  # (B, K) the targets, 0 on missing entries
    pos_weight: object  # (K,) the positive-class weights, or None
    present: object  # (B, K) bool, where a label is present
    weight: object  # (B, K) each entry's share of the loss: 0 if missing, 1/n for "mean"


def _first_bad(bad, what: str, values, K: int) -> str:
    """``"<value> at [b, k]"`` for the first true entry of the (B, K) bool array ``bad``."""
    flat = int(xp.argmax(bad.reshape(-1)))
    b, k = divmod(flat, K)
    return f"{what} {float(values[b, k])!r} at [{b}, {k}]"


def masked_bce_forward(logits, targets, mask=None, pos_weight=None, reduction: str = "mean"):
    """Masked binary cross-entropy between ``sigmoid(logits)`` and 0/1 targets.

    Args:
        logits: (B, K) floating-point scores, one per sample and label.
        targets: (B, K) labels in [0, 1] (bool, integer or float; usually 0 or 1,
            fractional soft labels are allowed). NaN marks a missing label.
        mask: optional (B, K) bool (or 0/1) array, true where the label is present.
            ``None``: every non-NaN target is present. Where the mask is false the
            target may hold anything (NaN, -1, ...): it is not read.
        pos_weight: optional (K,) non-negative weights :math:`w^+` multiplying each
            label's positive term (e.g. ``n_negative / n_positive`` per assay, for
            imbalanced labels). A host or device array; it gets no gradient.
        reduction: ``"mean"`` (over present entries), ``"sum"``, or ``"none"``
            (the (B, K) per-entry losses, 0 on missing entries).

    Returns:
        loss: 0-d array (or (B, K) for ``"none"``), kept on the device.
        cache: :class:`BCECache`.

    Raises:
        ValueError: for a bad ``reduction``, non-float or non-2-D logits, a shape
            mismatch of targets, mask or pos_weight, a mask that is not 0/1, a
            present target outside [0, 1], or a negative or non-finite pos_weight.
            The last three read values, so on a GPU backend (where that would stall
            the device) they are not checked here; check the host data first.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"masked_bce: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")
    if getattr(getattr(logits, "dtype", None), "kind", None) != "f":
        dtype = getattr(logits, "dtype", type(logits).__name__)
        raise ValueError(f"masked_bce: logits must be a floating-point array, got dtype {dtype}")
    shape = tuple(logits.shape)
    if len(shape) != 2:
        raise ValueError(
            f"masked_bce: logits must have shape (B, K), got {shape}; reshape a single label to (B, 1)"
        )
    K = shape[1]
    if tuple(targets.shape) != shape:
        raise ValueError(
            f"masked_bce: targets of shape {tuple(targets.shape)} do not match logits of shape "
            f"{shape}; expected targets of shape {shape}, one label per logit"
        )
    # Value checks read device data back, which a GPU training step must not do: on a GPU
    # they run on the host batch before the copy instead (PropertyTask's forward).
    check_values = backend.values_on_host(logits)
    y = targets.astype(logits.dtype)  # (B, K), a copy in the logits' dtype
    present = ~xp.isnan(y)  # (B, K) bool, NaN targets are missing
    if mask is not None:
        if tuple(mask.shape) != shape:
            raise ValueError(
                f"masked_bce: mask of shape {tuple(mask.shape)} does not match logits of shape "
                f"{shape}; expected a (B, K) mask, true where the label is present"
            )
        if mask.dtype.kind != "b" and check_values and bool(((mask != 0) & (mask != 1)).any()):
            raise ValueError(
                "masked_bce: mask must be boolean or hold only 0 and 1, got "
                + _first_bad((mask != 0) & (mask != 1), "value", mask, K)
            )
        present &= mask != 0  # (B, K) bool
    if check_values:
        bad = present & ((y < 0) | (y > 1))  # (B, K) bool
        if bool(bad.any()):
            raise ValueError(
                "masked_bce: present targets must lie in [0, 1], got " + _first_bad(bad, "target", y, K)
                + "; mark missing labels with mask= or NaN instead of a placeholder value"
            )
    pw = None
    if pos_weight is not None:
        pw = backend.asarray(pos_weight, dtype=logits.dtype)  # (K,)
        if tuple(pw.shape) != (K,):
            raise ValueError(
                f"masked_bce: pos_weight must have shape (K,) = ({K},), one weight per label, "
                f"got shape {tuple(pw.shape)}"
            )
        if check_values and not bool(((pw >= 0) & xp.isfinite(pw)).all()):
            raise ValueError("masked_bce: pos_weight must be finite and >= 0 (it scales each label's "
                             "positive term; use 1 for no reweighting)")

    # select, not multiply: a missing entry may hold an inf logit or a NaN target, and
    # inf * 0 or NaN * 0 is NaN; with both replaced by 0 every later step stays finite
    z = xp.where(present, logits, 0.0)  # (B, K)
    y = xp.where(present, y, 0.0)  # (B, K)
    soft = xp.log1p(xp.exp(-xp.abs(z)))  # (B, K), log(1 + e^{-|z|}) in [0, log 2]
    sp_pos = xp.maximum(z, 0.0) + soft  # (B, K), sp(z) = -log(1 - sigmoid(z))
    sp_neg = xp.maximum(-z, 0.0) + soft  # (B, K), sp(-z) = -log sigmoid(z)
    pos_term = y * sp_neg  # (B, K)
    if pw is not None:
        pos_term *= pw  # (B, K), pw (K,) broadcast over the batch
    loss_el = pos_term + (1.0 - y) * sp_pos  # (B, K)

    weight = present.astype(z.dtype)  # (B, K), 1 where present, 0 where missing
    loss_el = xp.where(present, loss_el, 0.0)  # (B, K), missing entries exactly 0
    if reduction == "mean":
        count = weight.sum()  # 0-d, number of present labels (stays on the device)
        denom = xp.maximum(count, 1.0)
        loss = loss_el.sum() / denom
        weight = weight / denom  # (B, K)
    elif reduction == "sum":
        loss = loss_el.sum()
    else:
        loss = loss_el  # (B, K)
    return loss, BCECache(z, y, pw, present, weight)


def masked_bce_backward(dloss, cache: BCECache):
    """Fused gradient ``((1 - y) sigmoid(z) - pos_weight * y * sigmoid(-z)) * weight``.

    Args:
        dloss: upstream gradient of the loss: a scalar (or 0-d array) for
            "mean"/"sum", or a (B, K) array for "none".
        cache: from :func:`masked_bce_forward`.

    Returns:
        dlogits: (B, K), exactly 0 on missing entries.
    """
    z, y, pw, present, weight = cache
    e = xp.exp(-xp.abs(z))  # (B, K), in (0, 1]; underflows harmlessly to 0 for large |z|
    r = 1.0 / (1.0 + e)  # (B, K), sigmoid(|z|), in [1/2, 1]
    nonneg = z >= 0  # (B, K) bool
    sig = xp.where(nonneg, r, e * r)  # (B, K), sigmoid(z)
    sig_neg = xp.where(nonneg, e * r, r)  # (B, K), sigmoid(-z) = 1 - sigmoid(z), without cancellation
    pos_grad = y * sig_neg  # (B, K)
    if pw is not None:
        pos_grad *= pw  # (B, K)
    g = (1.0 - y) * sig - pos_grad  # (B, K), d loss_el / dz
    w = weight * dloss  # (B, K), reduction weight times the upstream gradient
    return xp.where(present, g * w, 0.0)  # (B, K): missing entries exactly 0, even if dloss is NaN there
