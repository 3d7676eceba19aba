r"""Attention: masks, scaled dot-product attention, multi-head attention.

For one head, with :math:`Q \in \mathbb{R}^{T_q\times d}`, :math:`K, V` of :math:`T_k`
rows, :math:`s = 1/\sqrt d` and an optional bias :math:`A`:

.. math::
    S = s\,Q K^\top + A,\quad
    P = \mathrm{softmax}_{\text{rows}}(S,\ \text{masked entries} = -\infty),\quad
    O = P V .

Masked keys get exactly zero probability; a query with every key masked outputs
zeros, not NaN. Backward:

.. math::
    dV = P^\top dO,\quad dP = dO\,V^\top,\quad
    dS = P \odot \big(dP - \textstyle\sum_j dP_{ij}P_{ij}\big),\quad
    dQ = s\,dS\,K,\quad dK = s\,dS^\top Q,\quad dA = dS .

With dropout, :math:`P` becomes :math:`P \odot M` (a scaled keep-mask) and :math:`dP`
is multiplied by :math:`M`.

Multi-head: one weight :math:`W_{qkv} \in \mathbb{R}^{D\times 3Hd_h}` projects queries,
keys and values, each split into H heads; :math:`Y = [O_1|\dots|O_H]\, W_o + b_o`.
Cross-attention projects queries from X with its first :math:`Hd_h` columns, keys
and values from a ``context`` with the other :math:`2Hd_h`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from minitransformer import backend, kernels
from minitransformer.backend import check_attention_dout, check_attention_inputs, sum_to_shape, xp
from minitransformer.fast import attention as fast_attention
from minitransformer.fast import linear as fast_linear
from minitransformer.nn.elementwise import make_dropout_mask
from minitransformer.nn.graph_bias import GraphBias
from minitransformer.nn.kv_cache import KVCache
from minitransformer.nn.linear import Linear, linear_backward, linear_forward
from minitransformer.nn.module import Module, check_array
from minitransformer.nn.relative_position import RelativePositionBias
from minitransformer.nn.softmax import SoftmaxCache, softmax_backward, softmax_forward


def causal_mask(T: int, Tk: int | None = None):
    """(Tq, Tk) mask: query ``i``, at position ``i + Tk - Tq``, sees keys up to it (Tq < Tk
    when decoding with a cache)."""
    Tk = T if Tk is None else Tk
    if Tk < T:
        raise ValueError(f"causal_mask: Tk={Tk} must be >= Tq={T} (queries are the last Tq positions)")
    q_pos = xp.arange(Tk - T, Tk)[:, None]  # (Tq, 1), absolute query positions
    k_pos = xp.arange(Tk)[None, :]  # (1, Tk)
    return k_pos <= q_pos  # (Tq, Tk)


def padding_mask(ids, pad_id: int):
    """(B, 1, 1, T) mask, False at the padded keys of ``ids`` (B, T)."""
    if ids.ndim != 2:
        raise ValueError(f"padding_mask: ids must have shape (B, T), got {tuple(ids.shape)}")
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T)


def combine_masks(*masks):
    """AND of boolean masks (``True`` = may attend), broadcastable to the scores
    (B, H, Tq, Tk); ``None`` = no mask."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else (out & m)
    return out


class AttentionCache(NamedTuple):
    """What :func:`attention_backward` needs."""

    q: object  # (B, H, Tq, Dh) queries: dK = s dS^T Q
    k: object  # (B, H, Tk, Dh) keys: dQ = s dS K
    v: object  # (B, H, Tk, Dv) values: dP = dO V^T
    p: object  # (B, H, Tq, Tk) probabilities: the softmax backward
    pd: object  # (B, H, Tq, Tk) p after dropout: dV = pd^T dO
    dropout_mask: object  # (B, H, Tq, Tk) scaled keep-mask, or None
    scale: float  # s
    bias_shape: tuple | None  # dA is summed to it; or None


def attention_forward(q, k, v, mask=None, scale: float | None = None, dropout_mask=None, bias=None):
    """q (B, H, Tq, Dh), k (B, H, Tk, Dh), v (B, H, Tk, Dv) -> out (B, H, Tq, Dv), cache.
    ``mask``, ``bias``: broadcastable to (B, H, Tq, Tk); ``dropout_mask`` (divided by 1 - p):
    (B, H, Tq, Tk); each may be None. ``scale`` defaults to 1/sqrt(Dh)."""
    check_attention_inputs(q, k, v, mask, bias)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    s = (q @ k.swapaxes(-1, -2)) * scale  # (B, H, Tq, Tk) the logits
    if bias is not None:
        s = s + bias  # (B, H, Tq, Tk)
    if mask is not None:
        s = xp.where(mask, s, -xp.inf)  # (B, H, Tq, Tk) masked logits are exactly -inf
    p, _ = softmax_forward(s)  # (B, H, Tq, Tk) a fully masked row is all zeros
    pd = p if dropout_mask is None else p * dropout_mask  # (B, H, Tq, Tk)
    out = pd @ v  # (B, H, Tq, Dv)
    bias_shape = None if bias is None else tuple(bias.shape)
    return out, AttentionCache(q, k, v, p, pd, dropout_mask, scale, bias_shape)


def attention_backward(dout, cache: AttentionCache):
    """dout (B, H, Tq, Dv) -> dq (B, H, Tq, Dh), dk (B, H, Tk, Dh), dv (B, H, Tk, Dv),
    dbias (the bias's shape, or None)."""
    q, k, v, p, pd, dropout_mask, scale, bias_shape = cache
    check_attention_dout(dout, (*p.shape[:-1], v.shape[-1]))  # (B, H, Tq, Dv), the output's shape
    dv = pd.swapaxes(-1, -2) @ dout  # (B, H, Tk, Dv), in the forward pass out = pd @ v
    dp = dout @ v.swapaxes(-1, -2)  # (B, H, Tq, Tk)
    if dropout_mask is not None:
        dp = dp * dropout_mask  # (B, H, Tq, Tk), in the forward pass pd = p * dropout_mask
    ds = softmax_backward(dp, SoftmaxCache(p, -1))  # (B, H, Tq, Tk); 0 where p = 0 (masked)
    dq = (ds @ k) * scale  # (B, H, Tq, Dh), in the forward pass s = scale * q k^T
    dk = (ds.swapaxes(-1, -2) @ q) * scale  # (B, H, Tk, Dh)
    dbias = None if bias_shape is None else sum_to_shape(ds, bias_shape)  # the bias's shape
    return dq, dk, dv, dbias


def split_heads(x, H: int):
    """(B, T, H*d) -> (B, H, T, d), a view."""
    B, T, HD = x.shape
    return x.reshape(B, T, H, HD // H).transpose(0, 2, 1, 3)


def merge_heads(*parts):
    """(B, H, T, d) parts -> (B, T, n*H*d), a copy."""
    merged = [p.transpose(0, 2, 1, 3).reshape(p.shape[0], p.shape[2], p.shape[1] * p.shape[3])
              for p in parts]  # (B, T, H*d) each
    return merged[0] if len(merged) == 1 else xp.concatenate(merged, axis=-1)  # (B, T, n*H*d)


class MultiHeadAttention(Module):
    """Self- or cross-attention. A ``position_bias`` serves self-attention only (the
    encoder's positions are not the decoder's), as does a ``graph_bias`` (each molecule's
    relations between its tokens, given to ``forward``).

    Parameters: ``qkv.weight`` (D, 3*H*d_head), ``qkv.bias``, ``proj.weight``
    (H*d_head, D), ``proj.bias``; ``position_bias.table`` (H, n_buckets) and
    ``graph_bias.table`` (H, R) if any.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int | None = None, bias: bool = True,
                 attn_dropout: float = 0.0, rng: backend.RNG | None = None,
                 position_bias: RelativePositionBias | None = None, graph_bias: GraphBias | None = None):
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(f"MultiHeadAttention: d_model={d_model} is not divisible by "
                                 f"n_heads={n_heads}; pass d_head explicitly")
            d_head = d_model // n_heads
        if not 0.0 <= attn_dropout < 1.0:
            raise ValueError(f"MultiHeadAttention: attn_dropout must be in [0, 1), got {attn_dropout}")
        self.rng = backend.as_rng(rng)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.attn_dropout = float(attn_dropout)
        inner = n_heads * d_head
        self.qkv = Linear(d_model, 3 * inner, bias=bias, rng=self.rng)
        self.proj = Linear(inner, d_model, bias=bias, rng=self.rng)
        if position_bias is not None and position_bias.n_heads != n_heads:
            raise ValueError(f"MultiHeadAttention: the position bias has {position_bias.n_heads} heads, "
                             f"the attention {n_heads}")
        self.position_bias = position_bias
        if graph_bias is not None and graph_bias.n_heads != n_heads:
            raise ValueError(f"MultiHeadAttention: the graph bias has {graph_bias.n_heads} heads, the attention "
                             f"{n_heads}")
        self.graph_bias = graph_bias

    def extra_repr(self):
        dropout = f", attn_dropout={self.attn_dropout}" if self.attn_dropout else ""
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}{dropout}"

    def _check_input(self, x, what):
        check_array(x, f"MultiHeadAttention {what}")
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"MultiHeadAttention: {what} must have shape (B, T, d_model={self.d_model}), "
                             f"got {tuple(x.shape)}")

    def _project_cross(self, x, context, kv_cache):
        """q from x; k, v from the context, kept in ``kv_cache`` when decoding."""
        H, inner = self.n_heads, self.n_heads * self.d_head
        W, b = self.qkv.weight.data, self.qkv.bias
        bq, bkv = (None, None) if b is None else (b.data[:inner], b.data[inner:])  # (H*dh,), (2*H*dh,)
        if not kernels.fast:
            q, q_lin = linear_forward(x, W[:, :inner], bq)  # (B, Tq, H*dh)
        else:
            q, q_lin = fast_linear.linear_forward(x, W[:, :inner], bq)  # (B, Tq, H*dh)
        if kv_cache is not None and kv_cache.static:
            return split_heads(q, H), kv_cache.keys(), kv_cache.values(), (q_lin, None)
        if not kernels.fast:
            kv, kv_lin = linear_forward(context, W[:, inner:], bkv)  # (B, Tk, 2*H*dh)
        else:
            kv, kv_lin = fast_linear.linear_forward(context, W[:, inner:], bkv)  # (B, Tk, 2*H*dh)
        k, v = split_heads(kv[..., :inner], H), split_heads(kv[..., inner:], H)  # (B, H, Tk, dh) each
        if kv_cache is not None:
            kv_cache.set_static(k, v)
        return split_heads(q, H), k, v, (q_lin, kv_lin)

    def forward(self, x, context=None, mask=None, kv_cache: KVCache | None = None, relations=None):
        """x (B, Tq, D) attends to itself or to ``context`` (B, Tk, D) -> (B, Tq, D); with a
        ``kv_cache``, x holds the positions after the cached ones. ``relations`` (B, Tq, Tq):
        the graph bias's codes, given exactly when the layer has one."""
        self._check_input(x, "x")
        if (relations is None) != (self.graph_bias is None):
            raise ValueError("MultiHeadAttention: " + ("this layer has a graph bias; give each molecule's relations "
                                                       "(B, T, T)" if relations is None else
                                                       "relations were given, but this layer has no graph bias"))
        if relations is not None and (context is not None or kv_cache is not None):
            raise ValueError("MultiHeadAttention: a graph bias is for self-attention over whole molecules "
                             "(no context, no KV cache)")
        H, inner = self.n_heads, self.n_heads * self.d_head
        pos_bias = None
        if context is None:
            qkv = self.qkv(x)  # (B, Tq, 3*H*dh)
            q = split_heads(qkv[..., :inner], H)  # (B, H, Tq, dh)
            k = split_heads(qkv[..., inner:2 * inner], H)  # (B, H, Tq, dh)
            v = split_heads(qkv[..., 2 * inner:], H)  # (B, H, Tq, dh)
            past = 0 if kv_cache is None else kv_cache.length  # position of the first query
            if kv_cache is not None:
                k, v = kv_cache.append(k, v)  # (B, H, Tpast+Tq, dh) each
            if self.position_bias is not None:
                pos_bias = self.position_bias(q.shape[2], k.shape[2], offset=past)  # (1, H, Tq, Tk)
            if self.graph_bias is not None:
                graph = self.graph_bias(relations)  # (B, H, Tq, Tq)
                pos_bias = graph if pos_bias is None else pos_bias + graph  # (B, H, Tq, Tq)
            linear_caches = None  # self.qkv keeps its own
        else:
            if self.position_bias is not None:
                raise ValueError("MultiHeadAttention: a position bias is for self-attention; "
                                 "this layer was given a context")
            self._check_input(context, "context")
            q, k, v, linear_caches = self._project_cross(x, context, kv_cache)
        drop = None
        if self.training and self.attn_dropout > 0:
            shape = (q.shape[0], H, q.shape[2], k.shape[2])
            drop = make_dropout_mask(shape, self.attn_dropout, self.rng, q.dtype)  # (B, H, Tq, Tk)
        if not kernels.fast:  # the reference kernel, the math of this file
            o, attn_cache = attention_forward(q, k, v, mask=mask, dropout_mask=drop, bias=pos_bias)  # (B, H, Tq, dh)
            o = merge_heads(o)  # (B, Tq, H*dh)
        else:  # the fast twins (minitransformer/fast/attention.py)
            o, attn_cache = fast_attention.attention_forward(q, k, v, mask=mask, dropout_mask=drop,
                                                             bias=pos_bias)  # (B, H, Tq, dh)
            o = fast_attention.merge_heads(o)  # (B, Tq, H*dh), free: the twin writes o token-major
        y = self.proj(o)  # (B, Tq, D)
        self.cache = {"cross": context is not None, "linear": linear_caches, "attn": attn_cache}
        return y

    @property
    def attention_probs(self):
        """(B, H, Tq, Tk) probabilities of the last forward."""
        return None if self.cache is None else self.cache["attn"].p

    def backward(self, dy):
        """dy (B, Tq, D) -> dx, or (dx, dcontext) for cross-attention."""
        cache = self._require_cache()
        H, inner = self.n_heads, self.n_heads * self.d_head
        do = split_heads(self.proj.backward(dy), H)  # (B, H, Tq, dh), in the forward pass o
        if isinstance(cache["attn"], fast_attention.FastAttentionCache):  # the set that made the cache
            dq, dk, dv, dbias = fast_attention.attention_backward(do, cache["attn"])  # (B, H, T*, dh) each
            merge = fast_attention.merge_heads  # free for the twin's token-major gradients
        else:
            dq, dk, dv, dbias = attention_backward(do, cache["attn"])  # (B, H, T*, dh) each
            merge = merge_heads
        if dbias is not None and self.graph_bias is not None:
            self.graph_bias.backward(dbias)  # (B, H, Tq, Tq)
            dbias = dbias.sum(axis=0, keepdims=True) if self.position_bias is not None else None  # (1, H, Tq, Tk)
        if dbias is not None:
            self.position_bias.backward(dbias)  # (1, H, Tq, Tk), summed over the batch
        if not cache["cross"]:
            return self.qkv.backward(merge(dq, dk, dv))  # (B, Tq, D), from (B, Tq, 3*H*dh)
        q_lin, kv_lin = cache["linear"]
        if kv_lin is None:
            raise RuntimeError("MultiHeadAttention: backward through a cached (decoding) cross-attention")
        if isinstance(q_lin, fast_linear.FastLinearCache):  # the set that made the caches
            dx, dWq, dbq = fast_linear.linear_backward(merge(dq), q_lin)  # (B, Tq, D)
            dctx, dWkv, dbkv = fast_linear.linear_backward(merge(dk, dv), kv_lin)  # (B, Tk, D)
        else:
            dx, dWq, dbq = linear_backward(merge(dq), q_lin)  # (B, Tq, D)
            dctx, dWkv, dbkv = linear_backward(merge(dk, dv), kv_lin)  # (B, Tk, D)
        self.qkv.weight.grad[:, :inner] += dWq
        self.qkv.weight.grad[:, inner:] += dWkv
        if self.qkv.bias is not None:
            self.qkv.bias.grad[:inner] += dbq
            self.qkv.bias.grad[inner:] += dbkv
        return dx, dctx
