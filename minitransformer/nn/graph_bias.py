r"""The molecule's graph as a bias on the attention logits: relative positions whose
distance is counted in bonds, not in tokens.

A relative-position bias (:mod:`minitransformer.nn.relative_position`) adds to the
logit of query :math:`i` and key :math:`j` a learned number chosen by their distance
along the string. A graph bias chooses it by their *relation in the molecule*:
how many bonds apart two atoms are, which bond joins them, or which kind of non-atom
token either is (:mod:`minitransformer.chem.graph` defines the :math:`R` relations
and computes them from RDKit's parse of the very string the model reads). Each
molecule of a batch has its own relation codes :math:`r_{b,i,j} \in \{0,\dots,R-1\}`,
and each head its own learned table :math:`w \in \mathbb{R}^{H \times R}`:

.. math:: S_{b,h,i,j} = s\,q_{b,h,i}\cdot k_{b,h,j} + w_{h,\,r_{b,i,j}} .

This is Graphormer's spatial encoding (Ying et al., 2021, one bias per shortest-path
distance, with the bond's type folded in for bonded atoms), one table per layer. The
backward is the relative bias's scatter-add, over the batch as well: every logit that
read column :math:`r` returns its gradient there,

.. math:: \frac{\partial L}{\partial w_{h,r}} = \sum_{(b,i,j):\ r_{b,i,j} = r}
          \frac{\partial L}{\partial S_{b,h,i,j}} .

:func:`graph_bias_forward` / :func:`graph_bias_backward` are the kernels (the
derivation: ``docs/kernels/graph_bias.md``); :class:`GraphBias` owns the table.
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast import graph_bias as fast_graph_bias
from minitransformer.nn.module import Module, Parameter


class GraphBiasCache(NamedTuple):
    """What :func:`graph_bias_backward` needs: which column every logit read."""

    relations: object  # (B, T, T) integers: the relation code of every (molecule, query, key)
    shape: tuple  # (H, R) the table's shape, for dtable
    dtype: object  # the table's dtype, for dtable


def graph_bias_forward(table, relations):
    """Look up the bias of every (molecule, head, query, key).

    Args:
        table: (H, R) learned biases, one per head and relation.
        relations: (B, T, T) integer relation codes in [0, R).

    Returns:
        bias: (B, H, T, T); cache: :class:`GraphBiasCache`.
    """
    if table.ndim != 2 or relations.ndim != 3:
        raise ValueError(f"graph_bias_forward: table must be (H, R) and relations (B, T, T); got "
                         f"{tuple(table.shape)} and {tuple(relations.shape)}")
    bias = table[:, relations]  # (H, B, T, T)
    return bias.transpose(1, 0, 2, 3), GraphBiasCache(relations, tuple(table.shape), table.dtype)  # (B, H, T, T)


def graph_bias_backward(dbias, cache: GraphBiasCache):
    """Gradient of the lookup with respect to the table. dbias: (B, H, T, T).
    Returns dtable (H, R): each column sums the gradients of the logits that read it."""
    relations, (H, R), dtype = cache
    dtable_t = xp.zeros((R, H), dtype=dtype)  # (R, H): scatter_add indexes the first axis
    rows = dbias.transpose(0, 2, 3, 1).reshape(-1, H)  # (B*T*T, H), one row per (molecule, query, key)
    backend.scatter_add(dtable_t, relations.reshape(-1), rows)  # logits of one relation sum
    return dtable_t.T  # (H, R)


class GraphBias(Module):
    """The graph bias of one self-attention layer: ``forward(relations)`` returns the
    (B, H, T, T) bias to add to its logits.

    Args:
        n_heads: H, one bias per head.
        n_relations: R, the relation codes of :mod:`minitransformer.chem.graph`.
        init_std: the table starts as N(0, init_std^2) (Graphormer's 0.02).

    Parameter ``table`` (H, R).
    """

    def __init__(self, n_heads: int, n_relations: int, init_std: float = 0.02, rng: backend.RNG | None = None):
        if int(n_relations) != n_relations or n_relations < 1:
            raise ValueError(f"GraphBias: n_relations must be an integer >= 1, got {n_relations!r}")
        self.n_heads, self.n_relations = n_heads, int(n_relations)
        self.table = Parameter(backend.as_rng(rng).normal((n_heads, self.n_relations), std=init_std))  # (H, R)

    def extra_repr(self):
        return f"n_heads={self.n_heads}, n_relations={self.n_relations}"

    def forward(self, relations):
        """relations: (B, T, T) integer codes in [0, R). Returns the bias (B, H, T, T)."""
        if relations.ndim != 3 or relations.shape[1] != relations.shape[2]:
            raise ValueError(f"GraphBias: relations must have shape (B, T, T), got {tuple(relations.shape)}")
        if not kernels.fast:
            bias, self.cache = graph_bias_forward(self.table.data, relations)  # (B, H, T, T)
        else:  # the fast twin (minitransformer/fast/graph_bias.py)
            bias, self.cache = fast_graph_bias.graph_bias_forward(self.table.data, relations)  # (B, H, T, T)
        return bias

    def backward(self, dbias):
        """dbias: (B, H, T, T), the gradient of the bias. Accumulates ``table.grad``; returns None
        (the relations are inputs, not weights)."""
        cache = self._require_cache()
        if isinstance(cache, GraphBiasCache):  # the set that made the cache
            self.table.grad += graph_bias_backward(dbias, cache)  # (H, R)
        else:
            self.table.grad += fast_graph_bias.graph_bias_backward(dbias, cache)  # (H, R)
        return None
