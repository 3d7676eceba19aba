"""Small dataclass configs that round-trip through JSON.

Every model takes one config; ``cfg.to_dict()`` gives plain JSON types and
``Config.from_dict(d)`` rebuilds it, refusing unknown keys with a clear message
(a checkpoint from a newer version with extra options fails loudly, not silently).

Options shared by the three model configs:

* ``d_model`` (D), ``n_heads`` (H), ``d_head`` (default D // H; may differ, e.g. the
  reference molecules model uses heads as wide as D), ``n_layers``, ``d_ff``, ``max_len``;
* ``norm``: ``"post"`` (LayerNorm after each residual sum, the original transformer)
  or ``"pre"`` (before each sublayer, GPT-2 style);
* ``activation``: ``"gelu"`` (exact), ``"gelu_tanh"`` or ``"relu"``;
* ``pos``: ``"learned"`` or ``"sinusoidal"`` positions;
* dropout, each set separately: ``emb_dropout`` (on the embedding sum),
  ``attn_dropout`` (on attention probabilities), ``resid_dropout`` (on each
  sublayer's output), ``ff_dropout`` (on the feed-forward hidden layer);
* ``final_norm``: a LayerNorm after the last block (default: on for pre-LN, off for post-LN);
* ``bias``, ``seed``, and the special token ids.
"""
from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass
class ConfigBase:
    """Shared JSON helpers and option validation."""

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
        return cls.from_dict(json.loads(s))

    def _check_choice(self, field: str, allowed):
        value = getattr(self, field)
        if value not in allowed:
            raise ValueError(f"{type(self).__name__}.{field} must be one of {list(allowed)}, got {value!r}")

    def _check_common(self):
        """Validate the options every transformer config shares."""
        self._check_choice("norm", ("post", "pre"))
        self._check_choice("pos", ("learned", "sinusoidal"))
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
        self._check_common()
        if self.final_norm is None:
            self.final_norm = self.norm == "pre"
