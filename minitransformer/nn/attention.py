r"""Multi-head attention: projections, head split/merge, and a KV cache.

With input :math:`X \in \mathbb{R}^{B\times T\times D}`, H heads of width
:math:`d_h` (which may differ from D/H), one fused projection
:math:`W_{qkv} \in \mathbb{R}^{D\times 3Hd_h}` gives queries, keys and values:

.. math::
    [Q\,|\,K\,|\,V] = X W_{qkv} + b_{qkv},\qquad
    O_h = \mathrm{softmax}\!\Big(\tfrac{Q_h K_h^\top}{\sqrt{d_h}} + \text{mask}\Big) V_h,\qquad
    Y = [O_1|\dots|O_H]\, W_o + b_o .

For cross-attention the queries come from X and the keys and values from a
``context`` (the encoder output). The *same* weight serves both uses: its first
:math:`Hd_h` columns project queries, the other :math:`2Hd_h` keys and values.
So one parameter set names ``qkv.weight`` whatever the use, and self-attention
still runs a single fused matmul.
"""
from __future__ import annotations

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.functional import (
    attention_backward, attention_forward, linear_backward, linear_forward, make_dropout_mask,
)
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module


class KVCache:
    """Keys and values of the tokens decoded so far, for one attention layer.

    ``k`` and ``v`` are (B, H, capacity, d_h) buffers; the first ``length``
    positions are filled. ``append`` writes new positions in place (growing the
    buffer by doubling), so each decoding step costs O(1) copies, not O(T).
    For cross-attention the encoder's keys/values are stored once (``static``).
    """

    def __init__(self):
        self.k = self.v = None
        self.length = 0
        self.static = False

    def append(self, k_new, v_new):
        """Add (B, H, Tn, d_h) keys/values; return views of all (B, H, length, d_h)."""
        B, H, Tn, Dh = k_new.shape
        need = self.length + Tn
        if self.k is None or need > self.k.shape[2]:
            cap = max(need, 2 * (0 if self.k is None else self.k.shape[2]), 16)
            k = xp.empty((B, H, cap, Dh), dtype=k_new.dtype)  # (B, H, cap, d_h)
            v = xp.empty((B, H, cap, v_new.shape[3]), dtype=v_new.dtype)  # (B, H, cap, d_v)
            if self.length:
                k[:, :, : self.length] = self.k[:, :, : self.length]
                v[:, :, : self.length] = self.v[:, :, : self.length]
            self.k, self.v = k, v
        self.k[:, :, self.length:need] = k_new
        self.v[:, :, self.length:need] = v_new
        self.length = need
        return self.k[:, :, :need], self.v[:, :, :need]

    def set_static(self, k, v):
        """Store cross-attention keys/values computed once from the encoder output."""
        self.k, self.v, self.length, self.static = k, v, k.shape[2], True

    def reorder(self, index):
        """Keep batch rows ``index`` (B',) in that order: beam search reshuffles hypotheses."""
        if self.k is not None:
            self.k, self.v = self.k[index], self.v[index]


def split_heads(x, H: int):
    """(B, T, H*d) -> (B, H, T, d), a view."""
    B, T, HD = x.shape
    return x.reshape(B, T, H, HD // H).transpose(0, 2, 1, 3)


def merge_heads(x):
    """(B, H, T, d) -> (B, T, H*d) (a copy: the heads become contiguous per token)."""
    B, H, T, D = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * D)


class MultiHeadAttention(Module):
    """Multi-head (self- or cross-) attention.

    Args:
        d_model: model width D.
        n_heads: number of heads H.
        d_head: width of each head (default D // H). The reference molecules
            model uses heads as wide as D, so H * d_head may exceed D.
        bias: use biases in the projections.
        dropout: dropout on the attention probabilities.

    Parameters: ``qkv.weight`` (D, 3*H*d_head), ``qkv.bias``, ``proj.weight``
    (H*d_head, D), ``proj.bias``.
    """

    def __init__(self, d_model: int, n_heads: int, d_head: int | None = None, bias: bool = True,
                 dropout: float = 0.0, rng: backend.RNG | None = None):
        if d_head is None:
            if d_model % n_heads:
                raise ValueError(
                    f"MultiHeadAttention: d_model={d_model} is not divisible by n_heads={n_heads}; "
                    "pass d_head explicitly"
                )
            d_head = d_model // n_heads
        rng = rng or backend.RNG(0)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_head
        self.p_drop = float(dropout)
        self.rng = rng
        inner = n_heads * d_head
        self.qkv = Linear(d_model, 3 * inner, bias=bias, rng=rng)
        self.proj = Linear(inner, d_model, bias=bias, rng=rng)

    def _check_input(self, x, what):
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"MultiHeadAttention: {what} must have shape (B, T, d_model={self.d_model}), "
                f"got {tuple(x.shape)}"
            )

    def forward(self, x, context=None, mask=None, kv_cache: KVCache | None = None):
        """Attend from ``x`` (B, Tq, D) to itself or to ``context`` (B, Tk, D).

        Args:
            x: (B, Tq, D) queries' source.
            context: (B, Tk, D) keys'/values' source for cross-attention, or None.
            mask: boolean, broadcastable to (B, H, Tq, Tk); True = may attend.
            kv_cache: for incremental decoding. Self-attention appends this step's
                keys/values and attends over all of them; cross-attention computes the
                context's keys/values once and reuses them.

        Returns:
            (B, Tq, D).
        """
        self._check_input(x, "x")
        H, inner = self.n_heads, self.n_heads * self.d_head
        W, b = self.qkv.weight.data, None if self.qkv.bias is None else self.qkv.bias.data
        if context is None:
            qkv, lin_cache = linear_forward(x, W, b)  # (B, Tq, 3*H*dh), one fused matmul
            q, k, v = (split_heads(t, H) for t in (qkv[..., :inner], qkv[..., inner:2 * inner],
                                                   qkv[..., 2 * inner:]))  # 3 x (B, H, Tq, dh)
            lin_caches = (lin_cache,)
            if kv_cache is not None:
                k, v = kv_cache.append(k, v)  # (B, H, Tpast+Tq, dh)
        else:
            self._check_input(context, "context")
            q2, q_cache = linear_forward(x, W[:, :inner], None if b is None else b[:inner])  # (B, Tq, H*dh)
            q = split_heads(q2, H)  # (B, H, Tq, dh)
            if kv_cache is not None and kv_cache.static:
                k, v, kv_lin_cache = kv_cache.k, kv_cache.v, None
            else:
                kv2, kv_lin_cache = linear_forward(
                    context, W[:, inner:], None if b is None else b[inner:])  # (B, Tk, 2*H*dh)
                k, v = split_heads(kv2[..., :inner], H), split_heads(kv2[..., inner:], H)  # (B, H, Tk, dh)
                if kv_cache is not None:
                    kv_cache.set_static(k, v)
            lin_caches = (q_cache, kv_lin_cache)

        drop = None
        if self.training and self.p_drop > 0:
            shape = (q.shape[0], H, q.shape[2], k.shape[2])
            drop = make_dropout_mask(shape, self.p_drop, self.rng, q.dtype)  # (B, H, Tq, Tk)
        B, Tq, dv = q.shape[0], q.shape[2], v.shape[3]
        o_merged = xp.empty((B, Tq, H, dv), dtype=q.dtype)  # (B, Tq, H, dh): heads side by side per token
        o, attn_cache = attention_forward(q, k, v, mask=mask, dropout_mask=drop,
                                          out=o_merged.transpose(0, 2, 1, 3))  # (B, H, Tq, dh), a view
        y = self.proj(o_merged.reshape(B, Tq, H * dv))  # (B, Tq, D), merging the heads is a reshape
        self.cache = {"cross": context is not None, "lin": lin_caches, "attn": attn_cache,
                      "inner": inner}
        return y

    @property
    def attention_probs(self):
        """(B, H, Tq, Tk) probabilities of the last forward (read from the cache, for plots)."""
        return None if self.cache is None else self.cache["attn"]["p"]

    def backward(self, dy):
        """dy: (B, Tq, D). Returns dx (B, Tq, D), or (dx, dcontext) for cross-attention."""
        cache = self._require_cache()
        H, inner = self.n_heads, cache["inner"]
        do = self.proj.backward(dy)  # (B, Tq, H*dh)
        B, Tq, _ = do.shape
        do = do.reshape(B, Tq, H, -1).transpose(0, 2, 1, 3)  # (B, H, Tq, dh), in the forward pass o
        gW = self.qkv.weight.grad
        gb = None if self.qkv.bias is None else self.qkv.bias.grad
        if not cache["cross"]:
            # The products write dq, dk, dv straight into the fused projection's gradient
            # dqkv, laid out as its output qkv was: (B, Tq, [q|k|v], H, dh).
            dqkv = xp.empty((B, Tq, 3, H, self.d_head), dtype=dy.dtype)  # (B, Tq, 3, H, dh)
            views = tuple(dqkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))  # 3 x (B, H, Tq, dh)
            attention_backward(do, cache["attn"], out=views)
            dx, dW, db = linear_backward(dqkv.reshape(B, Tq, 3 * inner), cache["lin"][0])  # (B, Tq, D)
            gW += dW
            if gb is not None:
                gb += db
            return dx
        dq, dk, dv = attention_backward(do, cache["attn"])  # (B, H, T*, dh) each
        q_cache, kv_cache = cache["lin"]
        if kv_cache is None:
            raise RuntimeError("MultiHeadAttention: backward through a cached (decoding) cross-attention")
        dx, dWq, dbq = linear_backward(merge_heads(dq), q_cache)  # (B, Tq, D)
        Tk = dk.shape[2]
        dkv = xp.concatenate([merge_heads(dk), merge_heads(dv)], axis=-1)  # (B, Tk, 2*H*dh)
        dctx, dWkv, dbkv = linear_backward(dkv, kv_cache)  # (B, Tk, D)
        gW[:, :inner] += dWq
        gW[:, inner:] += dWkv
        if gb is not None:
            gb[:inner] += dbq
            gb[inner:] += dbkv
        return dx, dctx
