r"""Transformer blocks: attention and feed-forward sublayers with residuals and LayerNorm,
and the stack they make.

Each sublayer :math:`F` (self-attention, cross-attention, feed-forward) is wrapped
in a residual connection with dropout :math:`\delta` on its output and a
LayerNorm placed after the sum (post-LN, the original transformer) or before
the sublayer (pre-LN, GPT-2 and most modern models); :class:`Residual` is that
wrapper, forward and backward:

.. math::
    \text{post-LN:}\quad x \leftarrow \mathrm{LN}\big(x + \delta(F(x))\big) \qquad
    \text{pre-LN:}\quad  x \leftarrow x + \delta\big(F(\mathrm{LN}(x))\big)

Backward, given :math:`dy`:

* post-LN: :math:`ds = \mathrm{LN}'^\top dy`; then :math:`dx = ds + F'^\top \delta'^\top ds`;
* pre-LN: :math:`dx = dy + \mathrm{LN}'^\top F'^\top \delta'^\top dy`.

The blocks are residual sublayers in a row:

* :class:`EncoderBlock`: self-attention (every position sees every other), feed-forward;
* :class:`CausalBlock`: the same with causal self-attention, the block of a GPT;
* :class:`DecoderBlock`: causal self-attention, cross-attention to an encoder's
  output, feed-forward: the decoder of an encoder-decoder.

The feed-forward sublayer is the same two-layer MLP at every position,

.. math:: \mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\,W_2 + b_2,
          \qquad W_1 \in \mathbb{R}^{D\times d_{ff}},\ W_2 \in \mathbb{R}^{d_{ff}\times D},

with optional dropout on the hidden activation. With ``relative_bias`` set, a
block's self-attention owns a
:class:`~minitransformer.nn.relative_position.RelativePositionBias` and adds it to
its logits: bidirectional in an encoder block, causal (half the table) in the
others. Cross-attention never gets one.

A block takes the options whole (:class:`~minitransformer.nn.config.TransformerOptions`,
which every model's config extends). :class:`Stack` is the trunk every model
shares: embed, the blocks in order, an optional final LayerNorm, and back.
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
from minitransformer.nn.relative_position import RelativePositionBias


class FeedForward(Module):
    """``fc2(dropout(act(fc1(x))))``; x: (..., d_model) -> (..., d_model)."""

    def __init__(self, config: TransformerOptions, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.fc1 = Linear(config.d_model, config.d_ff, bias=config.bias, rng=rng)
        self.act = make_activation(config.activation)
        self.drop = Dropout(config.ff_dropout, rng=rng)
        self.fc2 = Linear(config.d_ff, config.d_model, bias=config.bias, rng=rng)

    def forward(self, x):
        """x: (..., d_model) -> (..., d_model)."""
        h = self.fc1(x)  # (..., d_ff)
        h = self.act(h)  # (..., d_ff)
        h = self.drop(h)  # (..., d_ff)
        self.cache = True
        return self.fc2(h)  # (..., d_model)

    def backward(self, dy):
        """dy: (..., d_model) -> dx (..., d_model)."""
        self._require_cache()
        dh = self.fc2.backward(dy)  # (..., d_ff)
        dh = self.drop.backward(dh)
        dh = self.act.backward(dh)
        return self.fc1.backward(dh)  # (..., d_model)


class Residual(Module):
    """One residual sublayer: ``x + drop(f(norm(x)))`` (pre-LN) or ``norm(x + drop(f(x)))``
    (post-LN), around the sublayer ``f`` (attention or feed-forward).

    The norm, the dropout and the sublayer belong to the block (their parameters keep the
    block's names, ``ln1.weight``, ``attn.qkv.weight``, which checkpoints use); the residual
    holds them in a tuple, which the walk over parameters and modules does not enter.
    """

    def __init__(self, placement: str, norm: LayerNorm, drop: Dropout, sublayer: Module):
        if placement not in ("pre", "post"):
            raise ValueError(f"norm must be 'post' or 'pre', got {placement!r}")
        self.placement = placement
        self.parts = (norm, drop, sublayer)

    def extra_repr(self):
        return f"{self.placement}-LN, around {type(self.parts[2]).__name__}"

    def forward(self, x, **sublayer_args):
        """x: (B, T, D), and what the sublayer takes beside its input. Returns (B, T, D)."""
        norm, drop, f = self.parts
        self.cache = True
        if self.placement == "pre":
            return x + drop(f(norm(x), **sublayer_args))  # (B, T, D)
        return norm(x + drop(f(x, **sublayer_args)))  # (B, T, D)

    def backward(self, dy):
        """dy: (B, T, D). Returns (dx, extra): extra is the sublayer's second gradient (the
        context's, for cross-attention) or None."""
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


def _self_attention(config: TransformerOptions, causal: bool, rng) -> MultiHeadAttention:
    position_bias = None if config.relative_bias == "none" else RelativePositionBias(
        config.n_heads, config.relative_max_distance, bidirectional=not causal, kind=config.relative_bias, rng=rng)
    return MultiHeadAttention(config.d_model, config.n_heads, config.d_head, bias=config.bias,
                              attn_dropout=config.attn_dropout, rng=rng, position_bias=position_bias)


class EncoderBlock(Module):
    """Self-attention, then feed-forward, each a :class:`Residual` sublayer:
    ``X = X + MHSA(LN1(X)); X = X + FFN(LN2(X))`` (pre-LN) or
    ``U = LN1(X + MHSA(X)); X = LN2(U + FFN(U))`` (post-LN).

    Args:
        config: the options (``d_model``, ``n_heads``, ``d_head``, ``d_ff``, ``norm``,
            ``activation``, the dropouts, ``bias``, ``relative_bias``, ``relative_max_distance``).
        rng: where the initial weights and the dropout masks come from.
    """

    causal = False  # causal self-attention? Then a relative bias covers earlier keys only

    def __init__(self, config: TransformerOptions, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.norm = config.norm
        self.attn = _self_attention(config, self.causal, rng)
        self.ln1 = LayerNorm(config.d_model)
        self.drop1 = Dropout(config.resid_dropout, rng=rng)
        self.ff = FeedForward(config, rng=rng)
        self.ln2 = LayerNorm(config.d_model)
        self.drop2 = Dropout(config.resid_dropout, rng=rng)
        self.attn_sublayer = Residual(config.norm, self.ln1, self.drop1, self.attn)
        self.ff_sublayer = Residual(config.norm, self.ln2, self.drop2, self.ff)

    def extra_repr(self):
        return f"norm={self.norm!r}"

    def forward(self, x, mask=None, kv_cache=None, context=None):
        """x: (B, T, D); mask broadcastable to (B, H, T, Tk); ``kv_cache`` for decoding. Returns (B, T, D)."""
        if context is not None:
            raise ValueError(f"{type(self).__name__} has no cross-attention; a block that reads a context is "
                             "DecoderBlock")
        x = self.attn_sublayer(x, mask=mask, kv_cache=kv_cache)  # (B, T, D)
        self.cache = True
        return self.ff_sublayer(x)  # (B, T, D)

    def backward(self, dy):
        """dy: (B, T, D) -> dx (B, T, D)."""
        self._require_cache()
        dy, _ = self.ff_sublayer.backward(dy)
        dx, _ = self.attn_sublayer.backward(dy)
        return dx


class CausalBlock(EncoderBlock):
    """An :class:`EncoderBlock` whose self-attention looks back only: the block of a
    decoder-only language model. The caller passes the causal mask; ``causal`` makes a
    relative-position bias cover the earlier keys only."""

    causal = True


class DecoderBlock(Module):
    """Causal self-attention, cross-attention to an encoder's output, feed-forward; each a
    :class:`Residual` sublayer. The decoder of an encoder-decoder (:class:`CausalBlock`
    is the one without cross-attention).

    Args: as :class:`EncoderBlock`.
    """

    causal = True  # its self-attention looks back only

    def __init__(self, config: TransformerOptions, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.norm = config.norm
        self.attn = _self_attention(config, True, rng)
        self.ln1 = LayerNorm(config.d_model)
        self.drop1 = Dropout(config.resid_dropout, rng=rng)
        self.cross = MultiHeadAttention(config.d_model, config.n_heads, config.d_head, bias=config.bias,
                                        attn_dropout=config.attn_dropout, rng=rng)
        self.ln_cross = LayerNorm(config.d_model)
        self.drop_cross = Dropout(config.resid_dropout, rng=rng)
        self.ff = FeedForward(config, rng=rng)
        self.ln2 = LayerNorm(config.d_model)
        self.drop2 = Dropout(config.resid_dropout, rng=rng)
        self.attn_sublayer = Residual(config.norm, self.ln1, self.drop1, self.attn)
        self.cross_sublayer = Residual(config.norm, self.ln_cross, self.drop_cross, self.cross)
        self.ff_sublayer = Residual(config.norm, self.ln2, self.drop2, self.ff)

    def extra_repr(self):
        return f"norm={self.norm!r}"

    def forward(self, x, mask=None, context=None, context_mask=None, kv_cache=None, cross_cache=None):
        """x: (B, T, D) target side; context: (B, Tk, D) encoder output; context_mask:
        broadcastable to (B, H, T, Tk). ``kv_cache``/``cross_cache``:
        :class:`~minitransformer.nn.attention.KVCache` for decoding. Returns (B, T, D)."""
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
    """The trunk of every model: token embedding, the blocks in order, an optional final
    LayerNorm; and its backward, in reverse. ``DecoderLM``, ``Encoder`` and both halves of
    ``Seq2Seq`` run through one.

    As in :class:`Residual`, the parts belong to the model (``embed``, ``blocks``, ``ln_f``
    keep the names its checkpoints use) and the stack holds them in a tuple.
    """

    def __init__(self, embed: Module, blocks, final_norm: LayerNorm | None = None):
        self.parts = (embed, blocks, final_norm)

    def forward(self, ids, mask=None, offset: int = 0, kv_caches=None, **cross):
        """ids: (B, T) token ids at positions ``offset ..``; mask broadcastable to
        (B, H, T, Tk); ``kv_caches``: one :class:`~minitransformer.nn.attention.KVCache` per
        block when decoding; ``cross``: ``context``, ``context_mask`` (and ``cross_caches``)
        for decoder blocks. Returns the hidden states (B, T, D)."""
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
        """dh: (B, T, D). Accumulates every parameter's gradient. Returns None, or, for
        decoder blocks (``context_shape`` given), the gradient of the context (B, Tk, D):
        every block's cross-attention adds its share."""
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
