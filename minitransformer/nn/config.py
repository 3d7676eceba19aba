"""The options a transformer is built from: :class:`TransformerOptions`, which every
model's config extends (``DecoderLMConfig``, ``EncoderConfig``, ``Seq2SeqConfig``), built
on :class:`ConfigBase`, a small dataclass that round-trips through JSON.

A config whose vocabulary size is None is a model's options before its data is known (a
training recipe holds its model that way, :mod:`minitransformer.train.recipe`); every model
refuses to be built from one (:meth:`ConfigBase.check_sized`).

A config is checked whole when made: each field has its declared type (``d_model="16"``
fails here, naming the field, not deep inside a layer), each size is at least 1, each
choice one of its values, each special token id in every vocabulary. Blocks and models
take the config whole, as nanoGPT's ``Block(config)`` does.
"""
from __future__ import annotations

import dataclasses
import json
import math
import types
import typing

from minitransformer.atomic import parse_json


@dataclasses.dataclass
class ConfigBase:
    """JSON round-trip and validation. ``Config.from_dict(d)`` refuses unknown keys: a
    checkpoint with options from a newer version fails loudly, not silently."""

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
        """Every field holds its declared type (``None`` where allowed) and every int is in
        range; the message names the field."""
        name = type(self).__name__
        hints = typing.get_type_hints(type(self))  # the declared types, as types (not strings)
        for f in dataclasses.fields(self):
            value, declared = getattr(self, f.name), hints[f.name]
            kinds = set(typing.get_args(declared)) if isinstance(declared, types.UnionType) else {declared}
            if value is None and type(None) in kinds:
                continue
            ok = ((bool in kinds and isinstance(value, bool))
                  or (int in kinds and isinstance(value, int) and not isinstance(value, bool))
                  or (float in kinds and isinstance(value, (int, float)) and not isinstance(value, bool)
                      and math.isfinite(value))
                  or (str in kinds and isinstance(value, str)))
            if not ok:
                raise ValueError(f"{name}.{f.name} must be {f.type}, got {value!r}")
            if int in kinds and not isinstance(value, bool):
                low = 1 if f.name in self._POSITIVE else 0
                if value < low:
                    raise ValueError(f"{name}.{f.name} must be an integer >= {low}, got {value!r}")

    #: The fields the data decides: a recipe's model config leaves them None until its vocabulary is built.
    VOCAB_FIELDS = ("vocab_size", "src_vocab_size", "tgt_vocab_size")

    def check_sized(self) -> None:
        """Refuse a config whose vocabulary size is still None (a recipe's model before its data
        is loaded): a model needs its token table's size."""
        unsized = [f for f in self.VOCAB_FIELDS if hasattr(self, f) and getattr(self, f) is None]
        if unsized:
            raise ValueError(f"{type(self).__name__}.{unsized[0]} is None: a model needs its vocabulary's size; "
                             f"set it with dataclasses.replace(config, {unsized[0]}=len(vocab))")

    def _check_token_ids(self):
        """Every special token id (``pad_id``, ``bos_id``, ...) lies in every vocabulary."""
        sizes = {f: getattr(self, f) for f in self.VOCAB_FIELDS if getattr(self, f, None) is not None}
        for f in dataclasses.fields(self):
            if f.name.endswith("_id"):
                for vocab, size in sizes.items():
                    if getattr(self, f.name) >= size:
                        raise ValueError(f"{type(self).__name__}.{f.name}={getattr(self, f.name)} is not a token "
                                         f"of a vocabulary of {vocab}={size} (ids are 0..{size - 1})")

    def _check_common(self):
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
    """The options every transformer config shares (keyword-only). D = ``d_model``,
    H = ``n_heads``; ``d_head`` defaults to D // H. ``norm``: ``"post"`` (LayerNorm after
    each residual sum, the original transformer) or ``"pre"`` (before each sublayer,
    GPT-2). ``pos``: ``"learned"`` or ``"sinusoidal"`` vectors added to the token
    embeddings, or ``"relative"``: none, a bias on each self-attention's logits instead.
    ``relative_bias``: ``"learned"`` (T5: a table per layer and head of distances
    clipped at ``relative_max_distance``), ``"alibi"`` (fixed slopes) or ``"none"``;
    default ``"learned"`` for ``pos="relative"``, else ``"none"``. Dropouts:
    ``emb_dropout`` on the embedding sum, ``attn_dropout`` on attention probabilities,
    ``resid_dropout`` on sublayer outputs, ``ff_dropout`` on the feed-forward hidden
    layer. ``final_norm``, a LayerNorm after the last block, defaults to on for pre-LN.
    """

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
