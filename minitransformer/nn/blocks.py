r"""Transformer blocks: attention and feed-forward sublayers with residuals and LayerNorm.

Each sublayer :math:`F` (self-attention, cross-attention, feed-forward) is wrapped
in a residual connection with dropout :math:`\delta` on its output and a
LayerNorm placed after the sum (post-LN, the original transformer) or before
the sublayer (pre-LN, GPT-2 and most modern models):

.. math::
    \text{post-LN:}\quad x \leftarrow \mathrm{LN}\big(x + \delta(F(x))\big) \qquad
    \text{pre-LN:}\quad  x \leftarrow x + \delta\big(F(\mathrm{LN}(x))\big)

So an encoder block is ``U = LN1(X + MHSA(X)); X = LN2(U + FFN(U))`` (post) or
``X = X + MHSA(LN1(X)); X = X + FFN(LN2(X))`` (pre). A decoder block adds a
cross-attention sublayer between the two, attending to the encoder output.

With ``relative_bias`` set, a block's self-attention owns a
:class:`~minitransformer.nn.relative_position.RelativePositionBias` and adds it
to its logits: bidirectional in an encoder block, causal (half the table) in a
decoder block. Every layer has a table of its own (T5 shares one across the
layers of a stack; one per layer keeps each module's forward cache its own, for
at most :math:`H(2M+1)` numbers a layer). Cross-attention never gets one.

Backward of one residual sublayer, given :math:`dy`:

* post-LN: :math:`ds = \mathrm{LN}'^\top dy`; then :math:`dx = ds + F'^\top \delta'^\top ds`;
* pre-LN: :math:`dx = dy + \mathrm{LN}'^\top F'^\top \delta'^\top dy`.

The feed-forward sublayer is the same two-layer MLP at every position,

.. math:: \mathrm{FFN}(x) = \mathrm{act}(x W_1 + b_1)\,W_2 + b_2,
          \qquad W_1 \in \mathbb{R}^{D\times d_{ff}},\ W_2 \in \mathbb{R}^{d_{ff}\times D},

with optional dropout on the hidden activation.

:class:`TransformerOptions` is what a stack of these blocks is built from, and
every model's config extends it (validated on construction; JSON round trip).
"""
from __future__ import annotations

import dataclasses
import json
import math

from minitransformer.atomic import parse_json
from minitransformer import backend
from minitransformer.nn.attention import MultiHeadAttention
from minitransformer.nn.elementwise import Dropout, make_activation
from minitransformer.nn.layernorm import LayerNorm
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module
from minitransformer.nn.relative_position import RelativePositionBias


class FeedForward(Module):
    """``fc2(dropout(act(fc1(x))))``; x: (..., d_model) -> (..., d_model)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "gelu", ff_dropout: float = 0.0,
                 bias: bool = True, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.fc1 = Linear(d_model, d_ff, bias=bias, rng=rng)
        self.act = make_activation(activation)
        self.drop = Dropout(ff_dropout, rng=rng)
        self.fc2 = Linear(d_ff, d_model, bias=bias, rng=rng)

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


def _check_norm(norm: str) -> str:
    if norm not in ("post", "pre"):
        raise ValueError(f"norm must be 'post' or 'pre', got {norm!r}")
    return norm


class EncoderBlock(Module):
    """Self-attention + feed-forward, each with a residual, dropout and LayerNorm.

    Args:
        d_model, n_heads, d_ff: widths. ``d_head`` defaults to d_model // n_heads.
        norm: ``"post"`` or ``"pre"``.
        activation: ``"gelu"``, ``"gelu_tanh"`` or ``"relu"``.
        attn_dropout: on the attention probabilities.
        resid_dropout: on each sublayer's output before the residual sum.
        ff_dropout: on the feed-forward hidden activation.
        relative_bias: ``"none"``, or the kind of relative-position bias the
            self-attention adds to its logits: ``"learned"`` or ``"alibi"``.
        relative_max_distance: the learned bias's largest distance with a bucket of its own.
    """

    causal = False  # causal self-attention? Then a relative bias covers earlier keys only

    def __init__(self, d_model: int, n_heads: int, d_ff: int, d_head: int | None = None,
                 norm: str = "pre", activation: str = "gelu", attn_dropout: float = 0.0,
                 resid_dropout: float = 0.0, ff_dropout: float = 0.0, bias: bool = True,
                 rng: backend.RNG | None = None, relative_bias: str = "none",
                 relative_max_distance: int = 16):
        rng = backend.as_rng(rng)
        self.norm = _check_norm(norm)
        position_bias = None if relative_bias == "none" else RelativePositionBias(
            n_heads, relative_max_distance, bidirectional=not self.causal, kind=relative_bias, rng=rng)
        self.attn = MultiHeadAttention(d_model, n_heads, d_head, bias=bias, attn_dropout=attn_dropout, rng=rng,
                                       position_bias=position_bias)
        self.ln1 = LayerNorm(d_model)
        self.drop1 = Dropout(resid_dropout, rng=rng)
        self._init_extra(d_model, n_heads, d_head, bias, attn_dropout, resid_dropout, rng)
        self.ff = FeedForward(d_model, d_ff, activation, ff_dropout, bias=bias, rng=rng)
        self.ln2 = LayerNorm(d_model)
        self.drop2 = Dropout(resid_dropout, rng=rng)

    def extra_repr(self):
        return f"norm={self.norm!r}"

    def _init_extra(self, *args):
        """Hook for the decoder's cross-attention sublayer (none here)."""

    # -- one residual sublayer, both placements ------------------------------
    def _sublayer_forward(self, x, ln, drop, fn):
        """post: LN(x + drop(fn(x)));  pre: x + drop(fn(LN(x))).  x: (B, T, D)."""
        if self.norm == "pre":
            return x + drop(fn(ln(x)))  # (B, T, D)
        return ln(x + drop(fn(x)))  # (B, T, D)

    def _sublayer_backward(self, dy, ln, drop, fn_backward):
        """Inverse of :meth:`_sublayer_forward`; returns (dx, extra) where extra is the
        sublayer's second gradient (the context's, for cross-attention) or None."""
        if self.norm == "pre":
            d = fn_backward(drop.backward(dy))  # in the forward pass: fn(LN(x))
            d, extra = d if isinstance(d, tuple) else (d, None)
            return dy + ln.backward(d), extra  # (B, T, D): residual path + sublayer path
        ds = ln.backward(dy)  # (B, T, D), gradient of the sum x + drop(fn(x))
        d = fn_backward(drop.backward(ds))
        d, extra = d if isinstance(d, tuple) else (d, None)
        return ds + d, extra

    def forward(self, x, mask=None, kv_cache=None):
        """x: (B, T, D); mask broadcastable to (B, H, T, Tk). Returns (B, T, D)."""
        x = self._sublayer_forward(x, self.ln1, self.drop1,
                                   lambda h: self.attn(h, mask=mask, kv_cache=kv_cache))
        x = self._sublayer_forward(x, self.ln2, self.drop2, self.ff)
        self.cache = True
        return x

    def backward(self, dy):
        """dy: (B, T, D) -> dx (B, T, D)."""
        self._require_cache()
        dy, _ = self._sublayer_backward(dy, self.ln2, self.drop2, self.ff.backward)
        dx, _ = self._sublayer_backward(dy, self.ln1, self.drop1, self.attn.backward)
        return dx


class DecoderBlock(EncoderBlock):
    """Causal self-attention, then (optionally) cross-attention to an encoder output,
    then feed-forward; each a residual sublayer as in :class:`EncoderBlock`.

    With ``cross_attention=False`` (decoder-only language models) it has the
    same sublayers as an encoder block; the caller passes a causal mask.
    """

    causal = True

    def __init__(self, *args, cross_attention: bool = True, **kwargs):
        self._cross = cross_attention
        super().__init__(*args, **kwargs)

    def _init_extra(self, d_model, n_heads, d_head, bias, attn_dropout, resid_dropout, rng):
        if self._cross:
            self.cross = MultiHeadAttention(d_model, n_heads, d_head, bias=bias, attn_dropout=attn_dropout, rng=rng)
            self.ln_cross = LayerNorm(d_model)
            self.drop_cross = Dropout(resid_dropout, rng=rng)

    def forward(self, x, mask=None, context=None, context_mask=None, kv_cache=None, cross_cache=None):
        """x: (B, T, D) target side; context: (B, Tk, D) encoder output (needed iff the
        block has cross-attention); context_mask: broadcastable to (B, H, T, Tk).
        ``kv_cache``/``cross_cache``: :class:`~minitransformer.nn.attention.KVCache` for decoding."""
        if self._cross and context is None:
            raise ValueError("DecoderBlock: this block has cross-attention; pass context (B, Tk, D)")
        if not self._cross and context is not None:
            raise ValueError("DecoderBlock: built with cross_attention=False but a context was given")
        x = self._sublayer_forward(x, self.ln1, self.drop1,
                                   lambda h: self.attn(h, mask=mask, kv_cache=kv_cache))
        if self._cross:
            x = self._sublayer_forward(
                x, self.ln_cross, self.drop_cross,
                lambda h: self.cross(h, context=context, mask=context_mask, kv_cache=cross_cache))
        x = self._sublayer_forward(x, self.ln2, self.drop2, self.ff)
        self.cache = True
        return x

    def backward(self, dy):
        """dy: (B, T, D) -> dx, or (dx, dcontext) when the block has cross-attention."""
        self._require_cache()
        dy, _ = self._sublayer_backward(dy, self.ln2, self.drop2, self.ff.backward)
        dctx = None
        if self._cross:
            dy, dctx = self._sublayer_backward(dy, self.ln_cross, self.drop_cross, self.cross.backward)
        dx, _ = self._sublayer_backward(dy, self.ln1, self.drop1, self.attn.backward)
        return dx if dctx is None else (dx, dctx)


# ---------------------------------------------------------------------------
# The options of a stack of blocks, which every model config extends
# ---------------------------------------------------------------------------
@dataclasses.dataclass
class ConfigBase:
    """Shared JSON helpers and option validation.

    Small dataclass configs that round-trip through JSON.

    Every model takes one config; ``cfg.to_dict()`` gives plain JSON types and
    ``Config.from_dict(d)`` rebuilds it, refusing unknown keys with a clear message
    (a checkpoint from a newer version with extra options fails loudly, not silently).

    Options shared by the three model configs:

    * ``d_model`` (D), ``n_heads`` (H), ``d_head`` (default D // H; may differ, e.g. the
      reference molecules model uses heads as wide as D), ``n_layers``, ``d_ff``, ``max_len``;
    * ``norm``: ``"post"`` (LayerNorm after each residual sum, the original transformer)
      or ``"pre"`` (before each sublayer, GPT-2 style);
    * ``activation``: ``"gelu"`` (exact), ``"gelu_tanh"`` or ``"relu"``;
    * ``pos``: where the positions enter. ``"learned"`` or ``"sinusoidal"``: a position
      vector added to each token embedding; ``"relative"``: no vector there, every
      self-attention layer adds a relative-position bias to its logits instead;
    * ``relative_bias``: that bias, ``"learned"`` (a table per layer and head of
      clipped distances, T5-style), ``"alibi"`` (fixed linear slopes, no parameters)
      or ``"none"``. Default: ``"learned"`` with ``pos="relative"``, ``"none"``
      otherwise. With ``pos="learned"`` or ``"sinusoidal"`` and a bias, the model uses
      absolute and relative positions side by side; ``pos="relative"`` needs a bias;
    * ``relative_max_distance``: M, the largest distance with a learned bias of its own
      (farther ones share the edge bucket; ALiBi ignores it);
    * dropout, each set separately: ``emb_dropout`` (on the embedding sum),
      ``attn_dropout`` (on attention probabilities), ``resid_dropout`` (on each
      sublayer's output), ``ff_dropout`` (on the feed-forward hidden layer);
    * ``final_norm``: a LayerNorm after the last block (default: on for pre-LN, off for post-LN);
    * ``bias``, ``seed``, and the special token ids.
    """

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d: dict):
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown option(s) {unknown}; known options are {sorted(names)}")
        return cls(**d)

    @classmethod
    def from_json(cls, s: str):
        return cls.from_dict(parse_json(s))

    def _check_choice(self, field: str, allowed):
        value = getattr(self, field)
        if value not in allowed:
            raise ValueError(f"{type(self).__name__}.{field} must be one of {list(allowed)}, got {value!r}")

    # int fields that must be at least 1 (every other int field: at least 0)
    _POSITIVE = ("max_len", "d_model", "n_heads", "d_head", "d_ff", "relative_max_distance", "n_layers",
                 "n_enc_layers", "n_dec_layers", "vocab_size", "src_vocab_size", "tgt_vocab_size")

    def _check_types(self):
        """Every field holds a value of its declared type (``int``, ``float``, ``bool``,
        ``str``, or ``None`` where allowed), and every int is in range; the message
        names the field. (``d_model="16"`` or ``n_heads=0`` fail here, not deep inside.)"""
        name = type(self).__name__
        for f in dataclasses.fields(self):
            value, kinds = getattr(self, f.name), {k.strip() for k in str(f.type).split("|")}
            if value is None and "None" in kinds:
                continue
            ok = (("bool" in kinds and isinstance(value, bool))
                  or ("int" in kinds and isinstance(value, int) and not isinstance(value, bool))
                  or ("float" in kinds and isinstance(value, (int, float)) and not isinstance(value, bool)
                      and math.isfinite(value))
                  or ("str" in kinds and isinstance(value, str)))
            if not ok:
                raise ValueError(f"{name}.{f.name} must be {f.type}, got {value!r}")
            if "int" in kinds and not isinstance(value, bool):
                low = 1 if f.name in self._POSITIVE else 0
                if value < low:
                    raise ValueError(f"{name}.{f.name} must be an integer >= {low}, got {value!r}")

    def _check_token_ids(self):
        """Every special token id (``pad_id``, ``bos_id``, ...) lies inside every vocabulary."""
        sizes = {f: getattr(self, f) for f in ("vocab_size", "src_vocab_size", "tgt_vocab_size") if hasattr(self, f)}
        for f in dataclasses.fields(self):
            if f.name.endswith("_id"):
                for vocab, size in sizes.items():
                    if getattr(self, f.name) >= size:
                        raise ValueError(f"{type(self).__name__}.{f.name}={getattr(self, f.name)} is not a token "
                                         f"of a vocabulary of {vocab}={size} (ids are 0..{size - 1})")

    def _check_common(self):
        """Validate the options every transformer config shares."""
        self._check_types()
        self._check_token_ids()
        self._check_choice("norm", ("post", "pre"))
        self._check_choice("pos", ("learned", "sinusoidal", "relative"))
        self._check_choice("relative_bias", ("none", "learned", "alibi"))
        if self.pos == "relative" and self.relative_bias == "none":
            raise ValueError(
                f"{type(self).__name__}: pos='relative' adds no position vector, so it needs "
                "relative_bias='learned' or 'alibi' (or leave relative_bias unset)"
            )
        self._check_choice("activation", ("gelu", "gelu_tanh", "relu"))
        if self.d_head is None and self.d_model % self.n_heads:
            raise ValueError(
                f"{type(self).__name__}: d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                "set d_head explicitly"
            )
        for name in ("emb_dropout", "attn_dropout", "resid_dropout", "ff_dropout"):
            p = getattr(self, name)
            if not 0.0 <= p < 1.0:
                raise ValueError(f"{type(self).__name__}.{name} must be in [0, 1), got {p}")


@dataclasses.dataclass(kw_only=True)
class TransformerOptions(ConfigBase):
    """The options every model config shares (keyword-only; see the module docstring)."""

    max_len: int = 128
    d_model: int = 64
    n_heads: int = 4
    d_head: int | None = None
    d_ff: int = 256
    norm: str = "pre"
    activation: str = "gelu"
    pos: str = "learned"
    relative_bias: str | None = None
    relative_max_distance: int = 16
    tie_embeddings: bool = False
    final_norm: bool | None = None
    emb_dropout: float = 0.0
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0
    ff_dropout: float = 0.0
    bias: bool = True
    pad_id: int = 0
    seed: int = 0

    def __post_init__(self):
        if self.relative_bias is None:  # resolved here, stored (and saved) as a string
            self.relative_bias = "learned" if self.pos == "relative" else "none"
        self._check_common()
        if self.final_norm is None:
            self.final_norm = self.norm == "pre"
