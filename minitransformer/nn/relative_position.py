r"""Relative positions: a bias on the attention logits that depends on the distance
between query and key, not on where the sequence starts.

Absolute positions (learned or sinusoidal, :mod:`minitransformer.nn.embedding`) are
added to the token vectors once, at the input. A relative-position bias instead
enters every self-attention layer through its logits (the ``bias`` of
:func:`~minitransformer.nn.attention.attention_forward`):

.. math:: S_{h,i,j} = s\,q_{h,i}\cdot k_{h,j} + A_{h,i,j},

where the query sits at absolute position :math:`i`, the key at :math:`j`, and
:math:`A` depends on the two only through :math:`j - i`. Two kinds:

**Learned** (T5-style). A table :math:`w \in \mathbb{R}^{H\times n_b}` holds one
learned number per head and *bucket* of clipped distance, with a maximum :math:`M`:

.. math::
    A_{h,i,j} = w_{h,\,b(i,j)},\qquad
    b(i,j) = \begin{cases}
        \mathrm{clip}(j - i,\,-M,\,M) + M \in \{0,\dots,2M\} & \text{bidirectional } (n_b = 2M+1)\\
        \min\big(\max(i - j,\,0),\,M\big) \in \{0,\dots,M\} & \text{causal } (n_b = M+1).
    \end{cases}

Every distance of :math:`M` or more (to one side) shares the edge bucket, so the
table stays small and the model works on sequences longer than it was trained
on. In the causal case keys after the query (:math:`j > i`) share bucket 0 with
:math:`j = i`; the causal mask hides them anyway. T5 itself spaces its buckets
logarithmically (exact for small distances, coarser for larger ones); plain
clipping (Shaw et al., 2018) is simpler and what this module does. The backward
is a scatter-add: every logit that read column :math:`b` returns its gradient there,

.. math:: \frac{\partial L}{\partial w_{h,b}} = \sum_{(i,j):\ b(i,j) = b} \frac{\partial L}{\partial A_{h,i,j}} .

**ALiBi** (Press et al., 2022). No parameters: a fixed penalty linear in the distance,

.. math:: A_{h,i,j} = -m_h\,|i - j|,\qquad m_h = 2^{-8h/H},\quad h = 1,\dots,H,

a geometric sequence of slopes, so some heads look far and others near. (For
an H that is not a power of two the paper interleaves slopes of the nearest
powers of two; here the same formula serves every H.) ALiBi never clips.

The kernels :func:`relative_bias_forward` / :func:`relative_bias_backward` do the
learned lookup; :class:`RelativePositionBias` owns the table (or the slopes) and
returns the (1, H, Tq, Tk) bias for queries at positions ``offset .. offset+Tq-1``
and keys at ``0 .. Tk-1``, which is what KV-cached decoding needs: the new
token at position ``offset`` attends to every cached key with the same
distances as in a full forward pass.
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.module import Module, Parameter

KINDS = ("learned", "alibi")


def n_buckets(max_distance: int, bidirectional: bool) -> int:
    """Columns of the learned table: 2M+1 distances -M..M, or M+1 distances 0..M (causal)."""
    return 2 * max_distance + 1 if bidirectional else max_distance + 1


def relative_buckets(q_pos, k_pos, max_distance: int, bidirectional: bool):
    """The table column b(i, j) of every (query, key) pair.

    Args:
        q_pos: (Tq,) integer absolute query positions. k_pos: (Tk,) key positions.
        max_distance: M >= 1; farther distances share the edge bucket.
        bidirectional: keys on both sides (2M+1 buckets) or only earlier ones (M+1).

    Returns:
        (Tq, Tk) integers in [0, n_buckets).
    """
    r = k_pos[None, :] - q_pos[:, None]  # (Tq, Tk) relative distance j - i
    if bidirectional:
        return xp.clip(r, -max_distance, max_distance) + max_distance  # (Tq, Tk) in 0..2M
    return xp.clip(-r, 0, max_distance)  # (Tq, Tk) in 0..M; later keys (r > 0) read bucket 0


class RelativeBiasCache(NamedTuple):
    """What :func:`relative_bias_backward` needs: where each logit's bias came from
    (the scatter-add sends its gradient back there), not the bias values."""

    buckets: object  # (Tq, Tk) integers: the table column every (query, key) pair read
    shape: tuple  # (H, n_buckets) the table's shape, for dtable
    dtype: object  # the table's dtype, for dtable


def relative_bias_forward(table, q_pos, k_pos, max_distance: int, bidirectional: bool = True):
    """Look up the learned bias of every (head, query, key).

    Args:
        table: (H, n_buckets) learned biases, n_buckets = 2M+1 (bidirectional) or M+1.
        q_pos: (Tq,) integer absolute query positions.
        k_pos: (Tk,) integer absolute key positions.
        max_distance: M, the largest distance with a bucket of its own.
        bidirectional: see :func:`relative_buckets`.

    Returns:
        bias: (H, Tq, Tk); cache: :class:`RelativeBiasCache`.
    """
    need = n_buckets(max_distance, bidirectional)
    if table.ndim != 2 or table.shape[1] != need:
        raise ValueError(
            f"relative_bias_forward: table must have shape (H, {need}) for max_distance={max_distance}, "
            f"bidirectional={bidirectional}; got {tuple(table.shape)}"
        )
    buckets = relative_buckets(q_pos, k_pos, max_distance, bidirectional)  # (Tq, Tk)
    bias = table[:, buckets]  # (H, Tq, Tk)
    return bias, RelativeBiasCache(buckets, tuple(table.shape), table.dtype)


def relative_bias_backward(dbias, cache: RelativeBiasCache):
    """Gradient of the lookup with respect to the table. dbias: (H, Tq, Tk).
    Returns dtable (H, n_buckets): each column sums the gradients of the logits that read it."""
    buckets, (H, nb), dtype = cache
    dtable_t = xp.zeros((nb, H), dtype=dtype)  # (n_buckets, H): scatter_add indexes the first axis
    rows = dbias.reshape(H, -1).T  # (Tq*Tk, H), one row per (query, key) pair
    backend.scatter_add(dtable_t, buckets.reshape(-1), rows)  # pairs of one bucket sum
    return dtable_t.T  # (H, n_buckets)


def alibi_slopes(n_heads: int, dtype=None):
    """ALiBi's fixed slopes m_h = 2^(-8h/H), h = 1..H. Returns (H,)."""
    h = xp.arange(1, n_heads + 1, dtype=xp.float64)  # (H,)
    return (2.0 ** (-8.0 * h / n_heads)).astype(dtype or backend.get_dtype())  # (H,)


def alibi_bias(slopes, q_pos, k_pos):
    """ALiBi's bias -m_h |i - j|. slopes: (H,); q_pos: (Tq,); k_pos: (Tk,). Returns (H, Tq, Tk)."""
    dist = xp.abs(q_pos[:, None] - k_pos[None, :]).astype(slopes.dtype)  # (Tq, Tk) |i - j|
    return -slopes[:, None, None] * dist[None]  # (H, Tq, Tk)


class RelativePositionBias(Module):
    """The relative-position bias of one self-attention layer: ``forward(Tq, Tk, offset)``
    returns (1, H, Tq, Tk) to add to its logits.

    Args:
        n_heads: H, one bias per head.
        max_distance: M (learned only): distances beyond it share the edge bucket.
        bidirectional: keys on both sides of the query (an encoder) or only earlier
            ones (a causal decoder: half the table).
        kind: ``"learned"`` (parameter ``table`` (H, n_buckets), initialised
            N(0, init_std^2)) or ``"alibi"`` (fixed slopes, no parameters).
    """

    def __init__(self, n_heads: int, max_distance: int = 16, bidirectional: bool = True,
                 kind: str = "learned", init_std: float = 0.02, rng: backend.RNG | None = None):
        if kind not in KINDS:
            raise ValueError(f"RelativePositionBias: kind must be one of {list(KINDS)}, got {kind!r}")
        if int(max_distance) != max_distance or max_distance < 1:
            raise ValueError(f"RelativePositionBias: max_distance must be an integer >= 1, got {max_distance}")
        self.n_heads, self.max_distance = n_heads, int(max_distance)
        self.bidirectional, self.kind = bool(bidirectional), kind
        if kind == "learned":
            rng = backend.as_rng(rng)
            shape = (n_heads, n_buckets(self.max_distance, self.bidirectional))  # (H, n_buckets)
            self.table = Parameter(rng.normal(shape, std=init_std))  # (H, n_buckets)
        else:
            self.slopes = alibi_slopes(n_heads)  # (H,)

    def extra_repr(self):
        distance = f", max_distance={self.max_distance}" if self.kind == "learned" else ""
        return f"{self.kind!r}, n_heads={self.n_heads}{distance}, bidirectional={self.bidirectional}"

    def on_astype(self, dtype):
        if self.kind == "alibi":
            self.slopes = alibi_slopes(self.n_heads, dtype)  # (H,)

    def forward(self, Tq: int, Tk: int, offset: int = 0):
        """Bias for queries at positions offset .. offset+Tq-1 and keys at 0 .. Tk-1.
        Returns (1, H, Tq, Tk), broadcast over the batch."""
        if offset < 0:
            raise ValueError(f"RelativePositionBias: offset must be >= 0, got {offset}")
        q_pos = xp.arange(offset, offset + Tq)  # (Tq,) absolute query positions
        k_pos = xp.arange(Tk)  # (Tk,) absolute key positions
        if self.kind == "alibi":
            bias = alibi_bias(self.slopes, q_pos, k_pos)  # (H, Tq, Tk)
            self.cache = (Tq, Tk, offset)  # nothing to learn; kept for the forward-first check
        else:
            bias, self.cache = relative_bias_forward(
                self.table.data, q_pos, k_pos, self.max_distance, self.bidirectional)  # (H, Tq, Tk)
        return bias[None]  # (1, H, Tq, Tk)

    def backward(self, dbias):
        """dbias: (1, H, Tq, Tk), the gradient of the bias (summed over the batch).
        Accumulates ``table.grad`` (learned); returns None (positions are not inputs)."""
        cache = self._require_cache()
        if self.kind == "learned":
            self.table.grad += relative_bias_backward(dbias[0], cache)  # (H, n_buckets)
        return None
