r"""Ranking metrics on the host (NumPy): ROC AUC for binary and multi-label scores.

For :math:`n_1` positives with scores :math:`s^+_i` and :math:`n_0` negatives with
scores :math:`s^-_j`, the area under the ROC curve is the probability that a random
positive outranks a random negative, a tie counting one half:

.. math::
    \mathrm{AUC} = \frac{U}{n_1 n_0},\qquad
    U = \sum_{i=1}^{n_1}\sum_{j=1}^{n_0}
        \Big(\mathbb 1[s^+_i > s^-_j] + \tfrac12\,\mathbb 1[s^+_i = s^-_j]\Big).

:math:`U` is the Mann-Whitney statistic. Ranking all :math:`n = n_1 + n_0` scores
together, with tied scores sharing the *average* of the ranks they span, gives
the same number as :math:`U = R_1 - n_1(n_1+1)/2`, where :math:`R_1` is the sum of
the positives' ranks. It is also exactly the trapezoid area under the ROC curve
drawn through one point per distinct score: lowering the threshold past a score
held by :math:`a` positives and :math:`b` negatives, with :math:`A` positives
scored above it, moves the curve from :math:`(F, A/n_1)` to
:math:`(F + b/n_0, (A+a)/n_1)`, a trapezoid of area
:math:`(bA + ab/2)/(n_1 n_0)`: the :math:`bA` pairs in which a positive above
:math:`v` beats a negative at :math:`v`, plus half of the :math:`ab` pairs tied at :math:`v`. Summing over scores gives
:math:`U/(n_1n_0)` again. So ties are handled correctly by every one of the three
definitions; only a curve drawn through the individual samples (one step per
sample, ties broken by sort order) would depend on the order of tied scores.

The AUC depends on the scores only through their order, so any strictly
increasing transform (a sigmoid of the logits, say) leaves it unchanged, and it
is undefined when one class is absent (:math:`n_1 n_0 = 0`).

The implementation counts pairs exactly, in integers: for each distinct score
:math:`v`, with :math:`a_v` positives and :math:`b_v` negatives at :math:`v` and
:math:`N_v` negatives below it, :math:`2U = \sum_v a_v (2N_v + b_v)`. One sort,
:math:`O(n\log n)`.

Arrays of any backend are copied to the host first (these are evaluation
metrics, computed once per epoch, not inside the training step).
"""
from __future__ import annotations

import math

import numpy as np

from minitransformer import backend

__all__ = ["roc_auc", "multilabel_roc_auc", "bootstrap_mean_auc"]


def _host(a, what: str) -> np.ndarray:
    """A host NumPy copy of ``a`` (any backend, list or array), checked to be real numbers."""
    out = np.asarray(backend.to_numpy(a))
    if out.dtype.kind not in "biuf":
        raise ValueError(f"{what} must hold real numbers (bool, int or float), got dtype {out.dtype}")
    return out


def _where(idx) -> str:
    return "[" + ", ".join(str(int(i)) for i in idx) + "]"


def _present_mask(mask, shape: tuple, fn: str) -> np.ndarray:
    """``mask`` as a bool array of ``shape`` (None: all true); 0/1 numbers are accepted."""
    if mask is None:
        return np.ones(shape, dtype=bool)
    m = _host(mask, f"{fn}: mask")
    if m.shape != shape:
        raise ValueError(f"{fn}: mask of shape {m.shape} does not match y_true of shape {shape}; "
                         "expected one entry per label, true where the label is present")
    if m.dtype.kind != "b":
        bad = (m != 0) & (m != 1)
        if bad.any():
            idx = np.argwhere(bad)[0]
            raise ValueError(f"{fn}: mask must be boolean or hold only 0 and 1, got {m[tuple(idx)].item()!r} "
                             f"at {_where(idx)}")
    return m != 0


def _check_present(y: np.ndarray, s: np.ndarray, present: np.ndarray, fn: str, label: str = ""):
    """Raise unless every present label is 0/1 and every present score is not NaN."""
    with np.errstate(invalid="ignore"):
        bad_y = present & (y != 0) & (y != 1)
    if bad_y.any():
        idx = np.argwhere(bad_y)[0]
        hint = ("; mark missing labels with mask= (NaN labels are not skipped automatically)"
                if np.isnan(y[tuple(idx)]) else "")
        raise ValueError(f"{fn}: y_true{label} must hold only 0 and 1 where present, got "
                         f"{y[tuple(idx)].item()!r} at {_where(idx)}{hint}")
    if s.dtype.kind == "f":
        bad_s = present & np.isnan(s)
        if bad_s.any():
            idx = np.argwhere(bad_s)[0]
            raise ValueError(f"{fn}: scores{label} must not be NaN where a label is present, got NaN at "
                             f"{_where(idx)}")


def _auc_from_counts(y: np.ndarray, s: np.ndarray) -> tuple[float, int, int]:
    """``(AUC, n_pos, n_neg)`` of 1-D bool labels ``y`` and scores ``s`` (NaN AUC if one class)."""
    n_pos = int(y.sum())
    n_neg = int(y.size - n_pos)
    if n_pos == 0 or n_neg == 0:
        return math.nan, n_pos, n_neg
    _, inv = np.unique(s, return_inverse=True)  # inv: index of each sample's distinct score
    inv = inv.reshape(-1)
    m = int(inv.max()) + 1
    a = np.bincount(inv[y], minlength=m)  # (m,) int64, positives at each distinct score
    b = np.bincount(inv[~y], minlength=m)  # (m,) int64, negatives at each distinct score
    below = np.cumsum(b) - b  # (m,) negatives strictly below each score
    twice_u = int((a * (2 * below + b)).sum())  # 2U, exact
    return twice_u / (2 * n_pos * n_neg), n_pos, n_neg  # Python ints: one correctly rounded division


def roc_auc(y_true, scores, mask=None) -> float:
    r"""Area under the ROC curve: :math:`U/(n_1 n_0)`, ties counting one half.

    Args:
        y_true: (N,) labels, 0/1 (bool, integer or float) where present.
        scores: (N,) real scores, higher meaning "more likely positive" (logits or
            probabilities: only their order matters). Not NaN where present.
        mask: optional (N,) bool (or 0/1), true where the label is present. Entries
            outside the mask are ignored whatever they hold (NaN, -1, ...). Without a
            mask every entry must be a valid label: NaN labels raise rather than being
            skipped silently.

    Returns:
        The AUC in [0, 1] as a Python float: 1 when every positive outscores every
        negative, 0 when every negative outscores every positive, 1/2 for constant scores.

    Raises:
        ValueError: if the inputs are not 1-D of equal length, a present label is
            not 0/1, a present score is NaN, or the present labels hold only one
            class (then the AUC is undefined).

    Example:
        >>> roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
        0.75
    """
    fn = "roc_auc"
    y = _host(y_true, f"{fn}: y_true")
    s = _host(scores, f"{fn}: scores")
    if y.ndim != 1 or s.ndim != 1:
        raise ValueError(f"{fn}: y_true and scores must be 1-D, got shapes {y.shape} and {s.shape}; use "
                         "multilabel_roc_auc for (N, K) arrays")
    if y.shape != s.shape:
        raise ValueError(f"{fn}: y_true of shape {y.shape} and scores of shape {s.shape} differ; expected "
                         "one score per label")
    present = _present_mask(mask, y.shape, fn)
    _check_present(y, s, present, fn)
    auc, n_pos, n_neg = _auc_from_counts(y[present] == 1, s[present])
    if math.isnan(auc):
        raise ValueError(f"{fn}: the AUC needs both classes, got {n_pos} positive(s) and {n_neg} negative(s) "
                         f"among {n_pos + n_neg} present label(s)")
    return auc


def multilabel_roc_auc(y_true, scores, mask=None, names=None) -> dict:
    r"""ROC AUC of every label (column) of a multi-label prediction, and their mean.

    Column :math:`k` is scored with :func:`roc_auc` on its present entries. A
    column whose present labels hold only one class (or none at all) has no AUC:
    it is reported as NaN, listed in ``"skipped"`` with the reason, and left out
    of the mean

    .. math:: \overline{\mathrm{AUC}} = \frac{1}{|S|}\sum_{k\in S}\mathrm{AUC}_k,
              \qquad S = \lbrace k : n_{1,k} > 0,\ n_{0,k} > 0\rbrace

    (the unweighted "macro" mean: every label counts the same, however many
    samples it has).

    Args:
        y_true: (N, K) labels, 0/1 where present.
        scores: (N, K) real scores (logits or probabilities).
        mask: optional (N, K) bool (or 0/1), true where the label is present.
            ``None``: every entry is present (and must be 0/1).
        names: optional K distinct label names (default ``"label_0"``, ...).

    Returns:
        A dict with
        ``"per_label"``: ``{name: AUC}`` in column order, NaN for skipped labels;
        ``"mean"``: the mean over the scored labels (NaN if there are none);
        ``"n_scored"``: :math:`|S|`;
        ``"skipped"``: ``{name: reason}`` for the labels without both classes;
        ``"n_pos"``, ``"n_neg"``: ``{name: count}`` of present positives and negatives.

    Raises:
        ValueError: for shapes that are not (N, K) and equal, a wrong number of
            names, a present label that is not 0/1 or a present NaN score (naming the
            label).
    """
    fn = "multilabel_roc_auc"
    y = _host(y_true, f"{fn}: y_true")
    s = _host(scores, f"{fn}: scores")
    if y.ndim != 2 or y.shape != s.shape:
        raise ValueError(f"{fn}: y_true and scores must both have shape (N, K), got {y.shape} and {s.shape}")
    K = y.shape[1]
    names = [f"label_{k}" for k in range(K)] if names is None else [str(n) for n in names]
    if len(names) != K or len(set(names)) != K:
        raise ValueError(f"{fn}: names must be {K} distinct names, one per column, got {len(names)} "
                         f"({len(set(names))} distinct)")
    present = _present_mask(mask, y.shape, fn)
    per_label, skipped, n_pos, n_neg = {}, {}, {}, {}
    for k, name in enumerate(names):
        col = present[:, k]  # (N,) bool
        _check_present(y[:, k], s[:, k], col, fn, label=f"[:, {k}] ({name!r})")
        auc, n_pos[name], n_neg[name] = _auc_from_counts(y[col, k] == 1, s[col, k])
        per_label[name] = auc
        if math.isnan(auc):
            if n_pos[name] + n_neg[name] == 0:
                skipped[name] = "no labels present"
            else:
                only = "positives" if n_neg[name] == 0 else "negatives"
                skipped[name] = f"only {only} ({n_pos[name] + n_neg[name]} present)"
    scored = [v for v in per_label.values() if not math.isnan(v)]
    return {
        "per_label": per_label,
        "mean": float(np.mean(scored)) if scored else math.nan,
        "n_scored": len(scored),
        "skipped": skipped,
        "n_pos": n_pos,
        "n_neg": n_neg,
    }


def bootstrap_mean_auc(y_true, scores, mask=None, resamples: int = 1000, seed: int = 0,
                       level: float = 0.95) -> dict:
    r"""How much the mean AUC of :func:`multilabel_roc_auc` owes to which molecules were tested.

    The rows (molecules) are drawn :math:`R` = ``resamples`` times with replacement, and
    the mean AUC of each draw computed as :func:`multilabel_roc_auc` does (a label with one
    class in a draw is left out of that draw's mean). The percentile interval of the draws
    at ``level`` and their standard deviation describe the test set's sampling noise: two
    models whose means differ by less than that are not told apart by this test set.

    Args:
        y_true, scores, mask: as :func:`multilabel_roc_auc`, (N, K).
        resamples: :math:`R`, the draws. seed: their random stream.

    Returns:
        ``{"low", "high", "std", "resamples", "used", "level"}``: the interval, the draws'
        standard deviation, the draws asked for and those with a mean (a draw in which no
        label holds both classes has none), and the level. With fewer than two such draws
        (a handful of test molecules) the interval and spread are None.
    """
    y = _host(y_true, "bootstrap_mean_auc: y_true")
    s = _host(scores, "bootstrap_mean_auc: scores")
    if y.ndim != 2 or y.shape != s.shape:
        raise ValueError(f"bootstrap_mean_auc: y_true and scores must both have shape (N, K), got {y.shape} and "
                         f"{s.shape}")
    if resamples < 2 or not 0 < level < 1:
        raise ValueError(f"bootstrap_mean_auc: resamples must be >= 2 and level in (0, 1), got {resamples}, {level}")
    present = _present_mask(mask, y.shape, "bootstrap_mean_auc")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)  # (R,)
    for r in range(resamples):
        rows = rng.integers(0, y.shape[0], y.shape[0])  # (N,) a draw with replacement
        means[r] = multilabel_roc_auc(y[rows], s[rows], mask=present[rows])["mean"]
    means = means[np.isfinite(means)]
    tail = 100 * (1 - level) / 2
    if means.size < 2:
        return {"low": None, "high": None, "std": None, "resamples": resamples, "used": int(means.size),
                "level": level}
    return {"low": float(np.percentile(means, tail)), "high": float(np.percentile(means, 100 - tail)),
            "std": float(np.std(means, ddof=1)), "resamples": resamples, "used": int(means.size), "level": level}
