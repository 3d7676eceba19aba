r"""Scaled dot-product attention over many heads at once.

For one head, with queries :math:`Q \in \mathbb{R}^{T_q\times d}`, keys
:math:`K \in \mathbb{R}^{T_k\times d}`, values :math:`V \in \mathbb{R}^{T_k\times d}`:

.. math::
    S = s\,Q K^\top,\qquad
    P = \mathrm{softmax}_{\text{rows}}(S \text{ with masked entries} = -\infty),\qquad
    O = P V,

with :math:`s = 1/\sqrt d` by default. Masked keys get :math:`-\infty` (not a
large negative number), so their probability is exactly zero however large the
other logits are. A query whose keys are *all* masked has nothing to attend to:
its row of :math:`P` is defined as zero, so it outputs zeros and passes zero
gradient, instead of the NaN that :math:`0/0` would give.

Backward, with :math:`dO` given:

.. math::
    dV = P^\top dO,\quad dP = dO\,V^\top,\quad
    dS = P \odot (dP - \delta),\quad
    dQ = s\,dS\,K,\quad dK = s\,dS^\top Q = dS^\top (sQ),

where :math:`\delta_i = \sum_j dP_{ij} P_{ij}` is one number per query row. It
equals :math:`dO_i \cdot O_i`, because
:math:`\sum_j dP_{ij} P_{ij} = \sum_j (dO_i \cdot V_j) P_{ij} = dO_i \cdot \sum_j P_{ij} V_j`,
so the code forms it from two (Tq, Dv) arrays instead of a (Tq, Tk) product.

The scale is applied to :math:`Q` (a (Tq, d) array) rather than to the (Tq, Tk)
logits: :math:`S = (sQ)K^\top`, and :math:`sQ` is kept for :math:`dK`.

(With attention dropout, :math:`O = (P \odot M) V` for a scaled keep-mask
:math:`M`, and :math:`dP` picks up the same factor :math:`M`; the identity for
:math:`\delta` still holds, since then :math:`\sum_j (dP_{ij} M_{ij}) P_{ij} = dO_i \cdot O_i`.)
"""
from __future__ import annotations

import math

from minitransformer.backend import xp
from minitransformer.parallel import batch_slices, parallel_for


def _check_mask(mask, shape):
    """Raise ValueError unless ``mask`` is boolean and broadcastable to ``shape`` (B, H, Tq, Tk)."""
    if mask.dtype != bool:
        raise ValueError(
            f"attention: mask must be boolean (True = may attend), got dtype {mask.dtype}"
        )
    if mask.ndim > 4 or any(m not in (1, s) for m, s in zip(mask.shape[::-1], shape[::-1])):
        raise ValueError(
            f"attention: mask of shape {tuple(mask.shape)} does not broadcast to the scores' "
            f"shape (B, H, Tq, Tk) = {tuple(shape)}; use (Tq, Tk), (B, 1, 1, Tk) or (B, H, Tq, Tk)"
        )


def attention_forward(q, k, v, mask=None, scale: float | None = None, dropout_mask=None, out=None):
    """Multi-head scaled dot-product attention.

    Args:
        q: (B, H, Tq, Dh) queries.
        k: (B, H, Tk, Dh) keys.
        v: (B, H, Tk, Dv) values.
        mask: boolean, broadcastable to (B, H, Tq, Tk); True = may attend. None = no mask.
        scale: multiplies the logits; default ``1/sqrt(Dh)``.
        dropout_mask: optional (B, H, Tq, Tk) keep-mask already divided by (1 - p)
            (attention dropout); None = no dropout.
        out: optional (B, H, Tq, Dv) array to write the output into, for instance the
            head view of a (B, Tq, H*Dv) buffer, so that merging the heads is a free
            reshape instead of a copy. None = a new array.

    Returns:
        out: (B, H, Tq, Dv).
        cache: dict with ``qs`` (the scaled queries), ``k``, ``v`` (for dQ, dK, dV), ``p``
        (B, H, Tq, Tk) the attention probabilities (also what the attention-map plots
        read), ``pd`` the probabilities after dropout (or ``p`` itself), ``out`` (the
        returned array itself: do not modify it in place before the backward),
        ``dropout_mask`` and ``scale``.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            "attention: q, k, v must be 4-D (B, H, T, Dh); got shapes "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[:3] != v.shape[:3] or q.shape[:2] != k.shape[:2]:
        raise ValueError(
            "attention: expected q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv); got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    B, H, Tq, Dh = q.shape
    Tk = k.shape[2]
    scale = 1.0 / math.sqrt(Dh) if scale is None else float(scale)
    blocked = None  # where attending is not allowed: built once, shared by every block
    if mask is not None:
        _check_mask(mask, (B, H, Tq, Tk))
        blocked = ~mask  # broadcastable to (B, H, Tq, Tk), bool
    qs = xp.empty(q.shape, dtype=q.dtype)  # (B, H, Tq, Dh), the scaled queries
    p = xp.empty((B, H, Tq, Tk), dtype=q.dtype)  # (B, H, Tq, Tk), the probabilities
    pd = p if dropout_mask is None else xp.empty_like(p)  # (B, H, Tq, Tk), after dropout
    if out is None:
        out = xp.empty((B, H, Tq, v.shape[3]), dtype=q.dtype)  # (B, H, Tq, Dv)

    def rows(b):  # one block of sequences: b is a slice of the batch axis
        drop = _batch_part(dropout_mask, b)
        _forward_block(q[b], k[b], v[b], _batch_part(blocked, b), scale, drop,
                       qs[b], p[b], pd[b], out[b])

    parallel_for(rows, batch_slices(B, H * Tq * Tk * p.itemsize), uses_blas=True)
    cache = {"qs": qs, "k": k, "v": v, "p": p, "pd": pd, "out": out, "dropout_mask": dropout_mask,
             "scale": scale}
    return out, cache


def _batch_part(a, b):
    """The part of a mask (or None) for batch slice ``b``: a (B, ...) mask gives
    (b, ...); masks without a batch axis of their own ((Tq, Tk), (H, Tq, Tk), or a
    leading axis of 1 that broadcasts) serve every block as they are."""
    if a is None or a.ndim < 4 or a.shape[0] == 1:
        return a
    return a[b]


def _forward_block(q, k, v, blocked, scale, dropout_mask, qs, p, pd, out):
    """The forward pass on one block of sequences, written into ``qs``, ``p``, ``pd``
    and ``out`` (views of the caller's full arrays; ``pd`` is ``p`` without dropout).
    ``blocked`` is the negated mask (True = may not attend) or None. Shapes as in
    :func:`attention_forward` with b sequences instead of B."""
    xp.multiply(q, scale, out=qs)  # (b, H, Tq, Dh), scaling q is cheaper than scaling (Tq, Tk) logits
    s = xp.matmul(qs, k.swapaxes(-1, -2), out=p)  # (b, H, Tq, Tk), the logits s q k^T
    if blocked is not None:
        xp.copyto(s, -xp.inf, where=blocked)  # in place: masked logits are exactly -inf
    row_max = s.max(axis=-1, keepdims=True)  # (b, H, Tq, 1), -inf on fully masked rows
    if blocked is not None:
        xp.copyto(row_max, 0.0, where=xp.isneginf(row_max))  # avoid -inf - -inf = NaN
    s -= row_max
    xp.exp(s, out=s)  # (b, H, Tq, Tk), exp(-inf) = 0 exactly
    denom = xp.einsum("bhqk->bhq", s)[..., None]  # (b, H, Tq, 1) row sums, 0 on fully masked rows
    if blocked is not None:
        xp.copyto(denom, 1.0, where=denom == 0)  # fully masked row: 0 / 1 = 0, not NaN
    s *= 1.0 / denom  # now p: one reciprocal per row, then a multiply per entry
    if dropout_mask is not None:
        xp.multiply(p, dropout_mask, out=pd)  # (b, H, Tq, Tk)
    xp.matmul(pd, v, out=out)  # (b, H, Tq, Dv), O = P V


def attention_backward(dout, cache, out=None):
    """Gradients of :func:`attention_forward`.

    Args:
        dout: (B, H, Tq, Dv).
        cache: from the forward pass.
        out: optional ``(dq, dk, dv)`` arrays to write the gradients into, for instance
            head views of one (B, T, 3, H, dh) buffer that the fused QKV projection's
            backward reads (no copies). None = new arrays.

    Returns:
        dq: (B, H, Tq, Dh); dk: (B, H, Tk, Dh); dv: (B, H, Tk, Dv).
    """
    dq, dk, dv = (None, None, None) if out is None else out  # where to write, or None
    qs, k, v, p, pd, o = cache["qs"], cache["k"], cache["v"], cache["p"], cache["pd"], cache["out"]
    dropout_mask = cache["dropout_mask"]
    B, H, Tq, Tk = p.shape
    dq = xp.empty(qs.shape, dtype=p.dtype) if dq is None else dq  # (B, H, Tq, Dh)
    dk = xp.empty(k.shape, dtype=p.dtype) if dk is None else dk  # (B, H, Tk, Dh)
    dv = xp.empty(v.shape, dtype=p.dtype) if dv is None else dv  # (B, H, Tk, Dv)

    def rows(b):  # one block of sequences: b is a slice of the batch axis
        drop = _batch_part(dropout_mask, b)
        _backward_block(dout[b], qs[b], k[b], v[b], p[b], pd[b], o[b], drop, cache["scale"],
                        dq[b], dk[b], dv[b])

    parallel_for(rows, batch_slices(B, H * Tq * Tk * p.itemsize), uses_blas=True)
    return dq, dk, dv


def _backward_block(dout, qs, k, v, p, pd, out, dropout_mask, scale, dq, dk, dv):
    """The backward pass on one block of sequences, written into ``dq``, ``dk``, ``dv``.
    Shapes as in :func:`attention_backward` with b sequences instead of B."""
    xp.matmul(pd.swapaxes(-1, -2), dout, out=dv)  # (b, H, Tk, Dv), in the forward pass out = pd @ v
    dp = dout @ v.swapaxes(-1, -2)  # (b, H, Tq, Tk)
    if dropout_mask is not None:
        dp *= dropout_mask  # in the forward pass pd = p * dropout_mask
    # softmax backward: ds = p * (dp - rowsum(dp * p)); masked entries have p = 0 -> ds = 0
    inner = xp.einsum("bhqd,bhqd->bhq", dout, out)[..., None]  # (b, H, Tq, 1), = rowsum(dp * p)
    dp -= inner
    dp *= p  # (b, H, Tq, Tk), now the gradient of the logits (qs) k^T
    xp.matmul(dp, k, out=dq)  # (b, H, Tq, Dh)
    dq *= scale  # in the forward pass qs = scale * q
    xp.matmul(dp.swapaxes(-1, -2), qs, out=dk)  # (b, H, Tk, Dh)
