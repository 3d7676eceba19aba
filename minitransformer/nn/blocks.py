r"""Transformer blocks and the stack they make.

Each sublayer :math:`F` (attention or feed-forward) sits in a :class:`Residual`, with
dropout :math:`\delta` on its output and LayerNorm after the sum (post-LN, the original
transformer) or before the sublayer (pre-LN, GPT-2):

.. math::
    \text{post-LN:}\quad x \leftarrow \mathrm{LN}\big(x + \delta(F(x))\big) \qquad
    \text{pre-LN:}\quad  x \leftarrow x + \delta\big(F(\mathrm{LN}(x))\big)

Backward, given :math:`dy`:

* post-LN: :math:`ds = \mathrm{LN}'^\top dy`; then :math:`dx = ds + F'^\top \delta'^\top ds`;
* pre-LN: :math:`dx = dy + \mathrm{LN}'^\top F'^\top \delta'^\top dy`.

The feed-forward sublayer is the same MLP at every position:

.. math:: \mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\,W_2 + b_2,
          \qquad W_1 \in \mathbb{R}^{D\times d_{ff}},\ W_2 \in \mathbb{R}^{d_{ff}\times D}.
"""
from __future__ import annotations

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.attention import MultiHeadAttention
from minitransformer.nn.config import TransformerOptions
from minitransformer.nn.elementwise import Dropout, make_activation
from minitransformer.nn.layernorm import LayerNorm
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module
from minitransformer.nn.graph_bias import GraphBias
from minitransformer.nn.relative_position import RelativePositionBias


class FeedForward(Module):
    """``fc2(dropout(act(fc1(x))))``; x: (..., d_model) -> (..., d_model)."""

    def __init__(self, config: TransformerOptions, rng: backend.RNG | None = None):
        c, rng = config, backend.as_rng(rng)
        self.fc1 = Linear(c.d_model, c.d_ff, bias=c.bias, rng=rng)
        self.act = make_activation(c.activation)
        self.drop = Dropout(c.ff_dropout, rng=rng)
        self.fc2 = Linear(c.d_ff, c.d_model, bias=c.bias, rng=rng)

    def forward(self, x):
        h = self.fc1(x)  # (..., d_ff)
        h = self.act(h)  # (..., d_ff)
        h = self.drop(h)  # (..., d_ff)
        self.cache = True
        return self.fc2(h)  # (..., d_model)

    def backward(self, dy):
        self._require_cache()
        dh = self.fc2.backward(dy)  # (..., d_ff)
        dh = self.drop.backward(dh)
        dh = self.act.backward(dh)
        return self.fc1.backward(dh)  # (..., d_model)


class Residual(Module):
    """The residual around sublayer ``f``. Its parts are the block's (their parameters keep
    its names), so they sit in a tuple, which the module walk skips."""

    def __init__(self, placement: str, norm: LayerNorm, drop: Dropout, sublayer: Module):
        if placement not in ("pre", "post"):
            raise ValueError(f"norm must be 'post' or 'pre', got {placement!r}")
        self.placement = placement
        self.parts = (norm, drop, sublayer)

    def extra_repr(self):
        return f"{self.placement}-LN, around {type(self.parts[2]).__name__}"

    def forward(self, x, **sublayer_args):
        """x: (B, T, D) -> (B, T, D)."""
        norm, drop, f = self.parts
        self.cache = True
        if self.placement == "pre":
            return x + drop(f(norm(x), **sublayer_args))  # (B, T, D)
        return norm(x + drop(f(x, **sublayer_args)))  # (B, T, D)

    def backward(self, dy):
        """dy: (B, T, D) -> (dx, dcontext or None)."""
        self._require_cache()
        norm, drop, f = self.parts
        if self.placement == "pre":
            d = f.backward(drop.backward(dy))  # in the forward pass: f(norm(x))
            d, extra = d if isinstance(d, tuple) else (d, None)
            return dy + norm.backward(d), extra  # (B, T, D): residual path + sublayer path
        ds = norm.backward(dy)  # (B, T, D), gradient of the sum x + drop(f(x))
        d = f.backward(drop.backward(ds))
        d, extra = d if isinstance(d, tuple) else (d, None)
        return ds + d, extra


def _self_attention(config: TransformerOptions, causal: bool, rng, graph_relations: int = 0) -> MultiHeadAttention:
    c = config
    position_bias = None if c.relative_bias == "none" else RelativePositionBias(
        c.n_heads, c.relative_max_distance, bidirectional=not causal, kind=c.relative_bias, rng=rng)
    graph_bias = GraphBias(c.n_heads, graph_relations, rng=rng) if graph_relations else None
    return MultiHeadAttention(c.d_model, c.n_heads, c.d_head, bias=c.bias, attn_dropout=c.attn_dropout, rng=rng,
                              position_bias=position_bias, graph_bias=graph_bias)


class EncoderBlock(Module):
    """Self-attention, then feed-forward, each a :class:`Residual`. With ``graph_relations``
    R > 0 (an encoder of molecules), the self-attention adds a graph bias over R relations
    (:mod:`~minitransformer.nn.graph_bias`), and ``forward`` takes each molecule's relations."""

    causal = False  # True: a relative-position bias covers the earlier keys only

    def __init__(self, config: TransformerOptions, rng: backend.RNG | None = None, graph_relations: int = 0):
        c, rng = config, backend.as_rng(rng)
        if graph_relations and self.causal:
            raise ValueError(f"{type(self).__name__}: a graph bias is for an encoder reading whole molecules")
        self.norm = c.norm
        self.attn = _self_attention(c, self.causal, rng, graph_relations)
        self.ln1 = LayerNorm(c.d_model)
        self.drop1 = Dropout(c.resid_dropout, rng=rng)
        self.ff = FeedForward(c, rng=rng)
        self.ln2 = LayerNorm(c.d_model)
        self.drop2 = Dropout(c.resid_dropout, rng=rng)
        self.attn_sublayer = Residual(c.norm, self.ln1, self.drop1, self.attn)
        self.ff_sublayer = Residual(c.norm, self.ln2, self.drop2, self.ff)

    def extra_repr(self):
        return f"norm={self.norm!r}"

    def forward(self, x, mask=None, kv_cache=None, context=None, relations=None):
        """x: (B, T, D); mask broadcastable to (B, H, T, Tk); relations (B, T, T): the graph
        bias's codes, given exactly when the block has one. Returns (B, T, D)."""
        if context is not None:
            raise ValueError(f"{type(self).__name__} has no cross-attention; a block that reads a context is "
                             "DecoderBlock")
        graph = {} if relations is None else {"relations": relations}
        x = self.attn_sublayer(x, mask=mask, kv_cache=kv_cache, **graph)  # (B, T, D)
        self.cache = True
        return self.ff_sublayer(x)  # (B, T, D)

    def backward(self, dy):
        """dy: (B, T, D) -> dx (B, T, D)."""
        self._require_cache()
        dy, _ = self.ff_sublayer.backward(dy)
        dx, _ = self.attn_sublayer.backward(dy)
        return dx


class CausalBlock(EncoderBlock):
    """A GPT's block: an :class:`EncoderBlock` that looks back (given the causal mask)."""

    causal = True


class DecoderBlock(Module):
    """Causal self-attention, cross-attention to an encoder's output, feed-forward: an
    encoder-decoder's decoder block."""

    causal = True

    def __init__(self, config: TransformerOptions, rng: backend.RNG | None = None):
        c, rng = config, backend.as_rng(rng)
        self.norm = c.norm
        self.attn = _self_attention(c, True, rng)
        self.ln1 = LayerNorm(c.d_model)
        self.drop1 = Dropout(c.resid_dropout, rng=rng)
        self.cross = MultiHeadAttention(c.d_model, c.n_heads, c.d_head, bias=c.bias,
                                        attn_dropout=c.attn_dropout, rng=rng)
        self.ln_cross = LayerNorm(c.d_model)
        self.drop_cross = Dropout(c.resid_dropout, rng=rng)
        self.ff = FeedForward(c, rng=rng)
        self.ln2 = LayerNorm(c.d_model)
        self.drop2 = Dropout(c.resid_dropout, rng=rng)
        self.attn_sublayer = Residual(c.norm, self.ln1, self.drop1, self.attn)
        self.cross_sublayer = Residual(c.norm, self.ln_cross, self.drop_cross, self.cross)
        self.ff_sublayer = Residual(c.norm, self.ln2, self.drop2, self.ff)

    def extra_repr(self):
        return f"norm={self.norm!r}"

    def forward(self, x, mask=None, context=None, context_mask=None, kv_cache=None, cross_cache=None):
        """x: (B, T, D); context: (B, Tk, D); context_mask broadcastable to (B, H, T, Tk);
        the caches: :class:`~minitransformer.nn.kv_cache.KVCache`. Returns (B, T, D)."""
        if context is None:
            raise ValueError("DecoderBlock: this block has cross-attention; pass context (B, Tk, D)")
        x = self.attn_sublayer(x, mask=mask, kv_cache=kv_cache)  # (B, T, D)
        x = self.cross_sublayer(x, context=context, mask=context_mask, kv_cache=cross_cache)  # (B, T, D)
        self.cache = True
        return self.ff_sublayer(x)  # (B, T, D)

    def backward(self, dy):
        """dy: (B, T, D) -> (dx (B, T, D), dcontext (B, Tk, D))."""
        self._require_cache()
        dy, _ = self.ff_sublayer.backward(dy)
        dy, dcontext = self.cross_sublayer.backward(dy)
        dx, _ = self.attn_sublayer.backward(dy)
        return dx, dcontext


class Stack(Module):
    """Every model's trunk: embedding, blocks, optional final LayerNorm (the model's parts,
    in a tuple as in :class:`Residual`)."""

    def __init__(self, embed: Module, blocks, final_norm: LayerNorm | None = None):
        self.parts = (embed, blocks, final_norm)

    def forward(self, ids, mask=None, offset: int = 0, kv_caches=None, **cross):
        """ids: (B, T) at positions ``offset ..``; ``kv_caches``: a KVCache per block;
        ``cross``: what decoder blocks take. Returns (B, T, D)."""
        embed, blocks, final_norm = self.parts
        cross_caches = cross.pop("cross_caches", None)
        h = embed(ids, offset=offset)  # (B, T, D)
        for i, block in enumerate(blocks):
            kv = None if kv_caches is None else kv_caches[i]
            if cross_caches is not None:
                h = block(h, mask=mask, kv_cache=kv, cross_cache=cross_caches[i], **cross)  # (B, T, D)
            else:
                h = block(h, mask=mask, kv_cache=kv, **cross)  # (B, T, D)
        self.cache = True
        return h if final_norm is None else final_norm(h)  # (B, T, D)

    def backward(self, dh, context_shape=None):
        """dh: (B, T, D). Returns None, or the context's gradient (B, Tk, D)."""
        self._require_cache()
        embed, blocks, final_norm = self.parts
        if final_norm is not None:
            dh = final_norm.backward(dh)  # (B, T, D)
        dcontext = None if context_shape is None else xp.zeros(context_shape, dtype=dh.dtype)  # (B, Tk, D)
        for block in reversed(list(blocks)):
            if dcontext is None:
                dh = block.backward(dh)  # (B, T, D)
            else:
                dh, dctx = block.backward(dh)  # (B, T, D), (B, Tk, D)
                dcontext += dctx
        embed.backward(dh)
        return dcontext
