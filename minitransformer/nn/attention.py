r"""Attention: masks, scaled dot-product attention, multi-head attention, the KV cache.

**Masks** are boolean, ``True`` = "this query may attend to this key", shaped to
broadcast against the scores (B, H, Tq, Tk): :func:`causal_mask` gives (Tq, Tk)
(query ``i`` sees keys ``0 .. i + Tk - Tq``; with Tq < Tk these are the bottom
rows of the triangle, which KV-cached decoding needs), :func:`padding_mask`
gives (B, 1, 1, Tk) (no query sees a padded key), :func:`combine_masks` ANDs them.

**Scaled dot-product attention**, for one head with queries
:math:`Q \in \mathbb{R}^{T_q\times d}`, keys :math:`K \in \mathbb{R}^{T_k\times d}`
and values :math:`V \in \mathbb{R}^{T_k\times d_v}`:

.. math::
    S = s\,Q K^\top + A,\qquad
    P = \mathrm{softmax}_{\text{rows}}(S \text{ with masked entries} = -\infty),\qquad
    O = P V,

with :math:`s = 1/\sqrt d` and an optional additive bias :math:`A` (a
relative-position bias, say). Masked keys get :math:`-\infty`, so their
probability is exactly zero; a query whose keys are *all* masked gets a row of
zeros (see :mod:`minitransformer.nn.softmax`), so it outputs zeros, not NaN.
Backward, with :math:`dO` given:

.. math::
    dV = P^\top dO,\quad dP = dO\,V^\top,\quad
    dS = P \odot \big(dP - \textstyle\sum_j dP_{ij}P_{ij}\big),\quad
    dQ = s\,dS\,K,\quad dK = s\,dS^\top Q,\quad dA = dS .

With attention dropout, :math:`O = (P \odot M) V` for a scaled keep-mask
:math:`M`, and :math:`dP` is multiplied by the same :math:`M`.

**Multi-head attention**: one fused projection
:math:`W_{qkv} \in \mathbb{R}^{D\times 3Hd_h}` gives queries, keys and values,
each split into H heads of width :math:`d_h`; the heads' outputs are put side by
side and projected back, :math:`Y = [O_1|\dots|O_H]\, W_o + b_o`. For
cross-attention the queries come from X and the keys and values from a
``context`` (the encoder output); the *same* weight serves, its first
:math:`Hd_h` columns projecting queries and the other :math:`2Hd_h` keys and values.
A self-attention layer may own a relative-position bias
(:mod:`minitransformer.nn.relative_position`), which it passes as :math:`A`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from minitransformer import backend, kernels
from minitransformer.backend import check_attention_dout, check_attention_inputs, sum_to_shape, xp
from minitransformer.fast import attention as fast_attention
from minitransformer.fast import linear as fast_linear
from minitransformer.nn.elementwise import make_dropout_mask
from minitransformer.nn.linear import Linear, linear_backward, linear_forward
from minitransformer.nn.module import Module, check_array
from minitransformer.nn.relative_position import RelativePositionBias
from minitransformer.nn.softmax import SoftmaxCache, softmax_backward, softmax_forward


def causal_mask(T: int, Tk: int | None = None):
    """Lower-triangular (Tq, Tk) boolean mask; ``Tk`` defaults to ``T``: query ``i``
    (at position ``i + Tk - Tq``) may see keys ``0 .. i + Tk - Tq``."""
    Tk = T if Tk is None else Tk
    if Tk < T:
        raise ValueError(f"causal_mask: Tk={Tk} must be >= Tq={T} (queries are the last Tq positions)")
    q_pos = xp.arange(Tk - T, Tk)[:, None]  # (Tq, 1), absolute query positions
    k_pos = xp.arange(Tk)[None, :]  # (1, Tk)
    return k_pos <= q_pos  # (Tq, Tk)


def padding_mask(ids, pad_id: int):
    """(B, 1, 1, T) mask that is False at the padded key positions of ``ids`` (B, T)."""
    if ids.ndim != 2:
        raise ValueError(f"padding_mask: ids must have shape (B, T), got {tuple(ids.shape)}")
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T)


def combine_masks(*masks):
    """Logical AND of broadcastable boolean masks; ``None`` means "no mask"."""
    out = None
    for m in masks:
        if m is None:
            continue
        out = m if out is None else (out & m)
    return out


class AttentionCache(NamedTuple):
    """What :func:`attention_backward` needs from the forward pass."""

    q: object  # (B, H, Tq, Dh) queries: dK = s dS^T Q
    k: object  # (B, H, Tk, Dh) keys: dQ = s dS K
    v: object  # (B, H, Tk, Dv) values: dP = dO V^T
    p: object  # (B, H, Tq, Tk) probabilities: the softmax backward (and attention maps)
    pd: object  # (B, H, Tq, Tk) probabilities after dropout (p itself without): dV = pd^T dO
    dropout_mask: object  # (B, H, Tq, Tk) scaled keep-mask, or None
    scale: float  # s
    bias_shape: tuple | None  # the bias's shape (dA is summed to it), or None without a bias


def attention_forward(q, k, v, mask=None, scale: float | None = None, dropout_mask=None, bias=None):
    """Multi-head scaled dot-product attention.

    Args:
        q: (B, H, Tq, Dh) queries.
        k: (B, H, Tk, Dh) keys.
        v: (B, H, Tk, Dv) values.
        mask: boolean, broadcastable to (B, H, Tq, Tk); True = may attend. None = no mask.
        scale: multiplies the logits; default ``1/sqrt(Dh)``.
        dropout_mask: (B, H, Tq, Tk) keep-mask already divided by (1 - p), or None.
        bias: added to the scaled logits, broadcastable to (B, H, Tq, Tk), or None.

    Returns:
        out: (B, H, Tq, Dv); cache: :class:`AttentionCache`.
    """
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
    """Gradients of :func:`attention_forward`.

    Args:
        dout: (B, H, Tq, Dv).
        cache: from the forward pass.

    Returns:
        dq: (B, H, Tq, Dh); dk: (B, H, Tk, Dh); dv: (B, H, Tk, Dv); dbias: the bias's
        shape, or None when there was no bias.
    """
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


class KVCache:
    """Keys and values of the tokens decoded so far, for one attention layer.

    ``k`` and ``v`` are **time-major** (capacity, B, H, d_h) buffers; the first
    ``length`` positions are filled. ``append`` writes new positions in place (growing
    the buffer by doubling), so each decoding step costs O(1) copies, not O(T), and
    returns (B, H, length, d_h) views, the shape attention takes. Time comes first
    so that the filled positions are one contiguous block, which a decoding step
    reads whole: the fast set, with Numba, reads it in one pass through memory
    (:mod:`minitransformer.fast.decode_attention`). For cross-attention the encoder's
    keys/values are stored once (``static``), as the (B, H, Tk, d_h) arrays they are:
    read them, like the others, through :meth:`keys` and :meth:`values`.

    ``capacity``: on the CPU, the positions the first buffer holds (the models pass
    their ``max_len``, which decoding never passes), so that it is allocated once
    and never copied; the OS maps a large buffer's pages on first write, so
    positions the decoding never reaches cost no memory. On a GPU (another backend)
    the whole buffer would be reserved at once: there the buffer grows by doubling.
    """

    def __init__(self, capacity: int = 0):
        self.k = self.v = None
        self.length = 0
        self.static = False
        self.capacity = capacity

    def append(self, k_new, v_new):
        """Add (B, H, Tn, d_h) keys/values; return views of all (B, H, length, d_h)."""
        B, H, Tn, Dh = k_new.shape
        need = self.length + Tn
        if self.k is None or need > self.k.shape[0]:
            first = self.capacity if backend.name() == "numpy" else 0  # see the class notes
            cap = max(need, 2 * (0 if self.k is None else self.k.shape[0]), 16, first)
            k = xp.empty((cap, B, H, Dh), dtype=k_new.dtype)  # (cap, B, H, d_h)
            v = xp.empty((cap, B, H, v_new.shape[3]), dtype=v_new.dtype)  # (cap, B, H, d_v)
            if self.length:
                k[: self.length] = self.k[: self.length]
                v[: self.length] = self.v[: self.length]
            self.k, self.v = k, v
        self.k[self.length:need] = k_new.transpose(2, 0, 1, 3)  # (Tn, B, H, d_h)
        self.v[self.length:need] = v_new.transpose(2, 0, 1, 3)  # (Tn, B, H, d_v)
        self.length = need
        return self.keys(), self.values()

    def keys(self):
        """The cached keys as a (B, H, length, d_h) view."""
        return self._view(self.k)

    def values(self):
        """The cached values as a (B, H, length, d_v) view."""
        return self._view(self.v)

    def _view(self, buffer):
        """A (capacity, B, H, d) buffer's filled positions as (B, H, length, d); a static one as it is."""
        if buffer is None:
            raise ValueError("KVCache: nothing cached yet; append keys and values (or set_static) first")
        return buffer if self.static else buffer[: self.length].transpose(1, 2, 0, 3)

    def set_static(self, k, v):
        """Store cross-attention keys/values (B, H, Tk, d_h) computed once from the encoder output."""
        self.k, self.v, self.length, self.static = k, v, k.shape[2], True

    def reorder(self, index):
        """Keep batch rows ``index`` (B',) in that order: beam search reshuffles hypotheses.
        Only the filled positions are copied, into new buffers of the same capacity."""
        if self.k is None:
            return
        if self.static:  # the encoder's keys/values, (B, H, Tk, d): every position is filled
            self.k, self.v = self.k[index], self.v[index]
            return
        n = self.length
        k = xp.empty((self.k.shape[0], index.shape[0]) + self.k.shape[2:], dtype=self.k.dtype)  # (cap, B', H, d_h)
        v = xp.empty((self.v.shape[0], index.shape[0]) + self.v.shape[2:], dtype=self.v.dtype)  # (cap, B', H, d_v)
        k[:n] = self.k[:n, index]
        v[:n] = self.v[:n, index]
        self.k, self.v = k, v


def split_heads(x, H: int):
    """(B, T, H*d) -> (B, H, T, d), a view."""
    B, T, HD = x.shape
    return x.reshape(B, T, H, HD // H).transpose(0, 2, 1, 3)


def merge_heads(*parts):
    """Put the heads side by side: each (B, H, T, d) part becomes (B, T, H*d), and
    several parts follow one another along the features, (B, T, n*H*d). A copy (the
    heads become contiguous per token)."""
    merged = [p.transpose(0, 2, 1, 3).reshape(p.shape[0], p.shape[2], p.shape[1] * p.shape[3])
              for p in parts]  # (B, T, H*d) each
    return merged[0] if len(merged) == 1 else xp.concatenate(merged, axis=-1)  # (B, T, n*H*d)


class MultiHeadAttention(Module):
    """Multi-head (self- or cross-) attention.

    Args:
        d_model: model width D.
        n_heads: number of heads H.
        d_head: width of each head (default D // H). The reference molecules
            model uses heads as wide as D, so H * d_head may exceed D.
        bias: use biases in the projections.
        attn_dropout: dropout probability on the attention probabilities.
        position_bias: a :class:`~minitransformer.nn.relative_position.RelativePositionBias`
            whose bias is added to the logits of self-attention, or None.
            Cross-attention takes none (the encoder's positions are not the decoder's).

    Parameters: ``qkv.weight`` (D, 3*H*d_head), ``qkv.bias``, ``proj.weight``
    (H*d_head, D), ``proj.bias``; ``position_bias.table`` (H, n_buckets) with a
    learned position bias.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int | None = None, bias: bool = True,
                 attn_dropout: float = 0.0, rng: backend.RNG | None = None,
                 position_bias: RelativePositionBias | None = None):
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(
                    f"MultiHeadAttention: d_model={d_model} is not divisible by n_heads={n_heads}; "
                    "pass d_head explicitly"
                )
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
            raise ValueError(
                f"MultiHeadAttention: the position bias has {position_bias.n_heads} heads, "
                f"the attention {n_heads}"
            )
        self.position_bias = position_bias

    def extra_repr(self):
        dropout = f", attn_dropout={self.attn_dropout}" if self.attn_dropout else ""
        return f"d_model={self.d_model}, n_heads={self.n_heads}, d_head={self.d_head}{dropout}"

    def _check_input(self, x, what):
        check_array(x, f"MultiHeadAttention {what}")
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"MultiHeadAttention: {what} must have shape (B, T, d_model={self.d_model}), "
                f"got {tuple(x.shape)}"
            )

    def _project_cross(self, x, context, kv_cache):
        """Cross-attention's projections: queries from x with the weight's first H*dh
        columns, keys and values from the context with the other 2*H*dh (computed once
        and kept in ``kv_cache`` when decoding). Returns q, k, v and the linear caches."""
        H, inner = self.n_heads, self.n_heads * self.d_head
        W, b = self.qkv.weight.data, self.qkv.bias
        bq, bkv = (None, None) if b is None else (b.data[:inner], b.data[inner:])  # (H*dh,), (2*H*dh,)
        if not kernels.fast:  # the reference kernel, the math of this file
            q, q_lin = linear_forward(x, W[:, :inner], bq)  # (B, Tq, H*dh)
        else:  # the fast twin (minitransformer/fast/linear.py)
            q, q_lin = fast_linear.linear_forward(x, W[:, :inner], bq)  # (B, Tq, H*dh)
        if kv_cache is not None and kv_cache.static:
            return split_heads(q, H), kv_cache.keys(), kv_cache.values(), (q_lin, None)
        if not kernels.fast:  # the reference kernel, the math of this file
            kv, kv_lin = linear_forward(context, W[:, inner:], bkv)  # (B, Tk, 2*H*dh)
        else:
            kv, kv_lin = fast_linear.linear_forward(context, W[:, inner:], bkv)  # (B, Tk, 2*H*dh)
        k, v = split_heads(kv[..., :inner], H), split_heads(kv[..., inner:], H)  # (B, H, Tk, dh) each
        if kv_cache is not None:
            kv_cache.set_static(k, v)
        return split_heads(q, H), k, v, (q_lin, kv_lin)

    def forward(self, x, context=None, mask=None, kv_cache: KVCache | None = None):
        """Attend from ``x`` (B, Tq, D) to itself or to ``context`` (B, Tk, D).

        Args:
            x: (B, Tq, D) queries' source.
            context: (B, Tk, D) keys'/values' source for cross-attention, or None.
            mask: boolean, broadcastable to (B, H, Tq, Tk); True = may attend.
            kv_cache: for incremental decoding. Self-attention appends this step's
                keys/values and attends over all of them (the new queries sit at
                positions ``kv_cache.length ..``, which the position bias needs);
                cross-attention computes the context's keys/values once and reuses them.

        Returns:
            (B, Tq, D).
        """
        self._check_input(x, "x")
        H, inner = self.n_heads, self.n_heads * self.d_head
        pos_bias = None
        if context is None:
            qkv = self.qkv(x)  # (B, Tq, 3*H*dh), one product for q, k and v
            q = split_heads(qkv[..., :inner], H)  # (B, H, Tq, dh)
            k = split_heads(qkv[..., inner:2 * inner], H)  # (B, H, Tq, dh)
            v = split_heads(qkv[..., 2 * inner:], H)  # (B, H, Tq, dh)
            past = 0 if kv_cache is None else kv_cache.length  # position of the first query
            if kv_cache is not None:
                k, v = kv_cache.append(k, v)  # (B, H, Tpast+Tq, dh) each
            if self.position_bias is not None:
                pos_bias = self.position_bias(q.shape[2], k.shape[2], offset=past)  # (1, H, Tq, Tk)
            linear_caches = None  # self.qkv keeps its own
        else:
            if self.position_bias is not None:
                raise ValueError("MultiHeadAttention: a position bias is for self-attention; "
                                 "this layer was given a context")
            self._check_input(context, "context")
            q, k, v, linear_caches = self._project_cross(x, context, kv_cache)
        drop = None
        if self.training and self.attn_dropout > 0:
            shape = (q.shape[0], H, q.shape[2], k.shape[2])  # (B, H, Tq, Tk)
            drop = make_dropout_mask(shape, self.attn_dropout, self.rng, q.dtype)  # (B, H, Tq, Tk)
        if not kernels.fast:  # the reference kernel, the math of this file
            o, attn_cache = attention_forward(q, k, v, mask=mask, dropout_mask=drop, bias=pos_bias)  # (B, H, Tq, dh)
            o = merge_heads(o)  # (B, Tq, H*dh)
        else:  # the fast twins (minitransformer/fast/attention.py), proven equal in tests/fast
            o, attn_cache = fast_attention.attention_forward(q, k, v, mask=mask, dropout_mask=drop,
                                                             bias=pos_bias)  # (B, H, Tq, dh)
            o = fast_attention.merge_heads(o)  # (B, Tq, H*dh), free: the twin writes o token-major
        y = self.proj(o)  # (B, Tq, D)
        self.cache = {"cross": context is not None, "linear": linear_caches, "attn": attn_cache}
        return y

    @property
    def attention_probs(self):
        """(B, H, Tq, Tk) probabilities of the last forward (read from the cache, for plots)."""
        return None if self.cache is None else self.cache["attn"].p

    def backward(self, dy):
        """dy: (B, Tq, D). Returns dx (B, Tq, D), or (dx, dcontext) for cross-attention."""
        cache = self._require_cache()
        H, inner = self.n_heads, self.n_heads * self.d_head
        do = split_heads(self.proj.backward(dy), H)  # (B, H, Tq, dh), in the forward pass o
        if isinstance(cache["attn"], fast_attention.FastAttentionCache):  # the set that made the cache
            dq, dk, dv, dbias = fast_attention.attention_backward(do, cache["attn"])  # (B, H, T*, dh) each
            merge = fast_attention.merge_heads  # free for the twin's token-major gradients
        else:
            dq, dk, dv, dbias = attention_backward(do, cache["attn"])  # (B, H, T*, dh) each
            merge = merge_heads
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
