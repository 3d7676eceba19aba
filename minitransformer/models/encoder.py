r"""``Encoder``: the bidirectional (BERT-like) transformer, with two heads.

Every position attends to every non-padding position (no causal mask)::

    h = dropout(E[ids] * s + P)                      # no P with pos="relative"
    h = block_n( ... block_1(h, padding mask) )      # EncoderBlock
    h = LN_f(h)                                      # optional (default on for pre-LN)

With ``pos="relative"`` (or a ``relative_bias`` beside learned/sinusoidal ``P``)
every block's self-attention adds a bidirectional relative-position bias to its logits.

Heads (chosen per call with ``forward(ids, head=...)``):

* ``"mlm"``: masked-language-model logits (B, T, V) from every position, with the
  projection optionally tied to the token embedding. :func:`mask_tokens` makes the
  corrupted inputs and targets (the usual 80/10/10 rule).
* ``"cls"``: a pooled head on the first token (the CLS / BOS position):
  :math:`y = h_{:,0} W_c + b_c`, shape (B, n_outputs), for classification
  (feed to a cross-entropy or sigmoid loss) or regression. With ``n_features`` > 0
  the head also reads a vector of F numbers given per molecule (such as RDKit's
  descriptors, :mod:`minitransformer.chem.descriptors`), side by side with the
  first token's state: :math:`y = [h_{:,0}; f] W_c + b_c`, :math:`W_c` of shape
  (D + F, n_outputs). The features are inputs: they get no gradient. With
  ``head_hidden`` = H > 0 the head is a two-layer network, as Chemprop's:
  :math:`y = \mathrm{drop}(\mathrm{act}([h_{:,0}; f] W_1 + b_1)) W_c + b_c`, :math:`W_1` of shape
  (D + F, H), the block's activation and ``resid_dropout``.
* ``None``: the hidden states (B, T, D) themselves.

(Two heads measured on Tox21 lost on its validation sets and left: the mean of the token
states beside the first token's, and a second pretraining target, the molecules' descriptors,
on the first token; ``docs/RESULTS.md`` keeps their figures.)
"""
from __future__ import annotations

import dataclasses

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.attention import padding_mask
from minitransformer.nn.embedding import OutputProjection, TokenEmbedder, check_token_batch
from minitransformer.nn.blocks import EncoderBlock, Stack
from minitransformer.nn.config import TransformerOptions
from minitransformer.nn import Dropout, LayerNorm, Linear, Module, ModuleList, make_activation, set_rng



@dataclasses.dataclass(kw_only=True)
class EncoderConfig(TransformerOptions):
    """Options of :class:`Encoder`. ``n_outputs`` > 0 adds the pooled CLS head, which
    reads ``n_features`` numbers per molecule beside the CLS state, through a hidden
    layer of ``head_hidden`` units when that is > 0; ``mlm_head`` adds the masked-LM
    head (tied to the embedding if ``tie_embeddings``)."""

    vocab_size: int = dataclasses.field(kw_only=False)
    n_layers: int = 2
    tie_embeddings: bool = True
    mlm_head: bool = True
    n_outputs: int = 0
    n_features: int = 0
    head_hidden: int = 0

    #: Options an encoder was made with before its heads that lost on validation left: at their
    #: defaults they change nothing and are read as absent; otherwise the model cannot be made.
    REMOVED = {"pooling": "cls", "n_aux": 0}

    @classmethod
    def from_dict(cls, d: dict):
        """The config of ``d`` (a checkpoint's); a removed option at its default is read as absent."""
        d = dict(d)
        for name, default in cls.REMOVED.items():
            if name in d and d[name] != default:
                raise ValueError(f"EncoderConfig: {name}={d[name]!r} was an option of a head that has been removed "
                                 "(it lost on validation, docs/RESULTS.md); this model cannot be made any more")
            d.pop(name, None)
        return super().from_dict(d)

    def __post_init__(self):
        super().__post_init__()  # types and ranges: n_features, head_hidden >= 0
        for name in ("n_features", "head_hidden"):
            if getattr(self, name) and not self.n_outputs:
                raise ValueError(f"EncoderConfig: {name}={getattr(self, name)} needs n_outputs > 0, the cls head "
                                 "it belongs to")


class Encoder(Module):
    """Bidirectional transformer encoder with optional MLM and pooled heads."""

    def __init__(self, config: EncoderConfig):
        self.config = c = config
        self.rng = backend.RNG(c.seed)
        self.embed = TokenEmbedder(c.vocab_size, c.d_model, c.max_len, c.pos, c.emb_dropout, self.rng)
        self.blocks = ModuleList(EncoderBlock(c, rng=self.rng) for _ in range(c.n_layers))
        self.ln_f = LayerNorm(c.d_model) if c.final_norm else None
        self.mlm = (OutputProjection(c.d_model, c.vocab_size, c.bias, self.rng,
                                     tied_to=self.embed.tok if c.tie_embeddings else None)
                    if c.mlm_head else None)
        width = c.d_model + c.n_features  # [h_cls; f]
        self.cls_hidden = self.cls_act = self.cls_drop = None
        if c.n_outputs and c.head_hidden:
            self.cls_hidden = Linear(width, c.head_hidden, bias=True, rng=self.rng)
            self.cls_act, self.cls_drop = make_activation(c.activation), Dropout(c.resid_dropout, rng=self.rng)
            width = c.head_hidden
        self.cls = Linear(width, c.n_outputs, bias=True, rng=self.rng) if c.n_outputs > 0 else None
        self.stack = Stack(self.embed, self.blocks, self.ln_f)  # embed -> blocks -> ln_f, and back
        set_rng(self, self.rng)

    def encode(self, ids):
        """ids (B, T) -> hidden states (B, T, D), padding keys masked."""
        check_token_batch(ids, self.config.vocab_size, self.config.max_len, "Encoder")
        mask = padding_mask(ids, self.config.pad_id)  # (B, 1, 1, T)
        return self.stack(ids, mask=mask)  # (B, T, D)

    def encode_backward(self, dh):
        """dh: (B, T, D) gradient of the hidden states; accumulates parameter gradients."""
        self.stack.backward(dh)

    def forward(self, ids, head: str | None = None, features=None):
        """Hidden states (head=None), MLM logits (B, T, V) or pooled outputs (B, n_outputs);
        ``features`` (B, n_features): the cls head's extra inputs (only and always with n_features > 0)."""
        if features is not None and head != "cls":
            raise ValueError(f"Encoder: features are read by the 'cls' head only, not by head={head!r}")
        h = self.encode(ids)  # (B, T, D)
        self.cache = (head, h.shape)  # (head, (B, T, D))
        if head is None:
            return h
        if head == "mlm":
            if self.mlm is None:
                raise ValueError("Encoder: built with mlm_head=False; there is no 'mlm' head")
            return self.mlm(h)  # (B, T, V)
        if head == "cls":
            if self.cls is None:
                raise ValueError("Encoder: built with n_outputs=0; there is no 'cls' head")
            z = self._pooled(h, features)  # (B, D + F)
            if self.cls_hidden is not None:
                z = self.cls_drop(self.cls_act(self.cls_hidden(z)))  # (B, head_hidden)
            return self.cls(z)  # (B, n_outputs)
        raise ValueError(f"Encoder: head must be None, 'mlm' or 'cls', got {head!r}")

    def backward(self, dout):
        """Gradient of whatever the last forward returned; returns None."""
        head, shape = self._require_cache()
        if head is None:
            dh = dout
        elif head == "mlm":
            dh = self.mlm.backward(dout)  # (B, T, D)
        else:
            D = shape[-1]
            dh = xp.zeros(shape, dtype=dout.dtype)  # (B, T, D): the first position's gradient only
            dz = self.cls.backward(dout)  # (B, D + F) or (B, head_hidden)
            if self.cls_hidden is not None:
                dz = self.cls_hidden.backward(self.cls_act.backward(self.cls_drop.backward(dz)))  # (B, D + F)
            dh[:, 0] += dz[:, :D]  # the features' columns get no gradient
        self.encode_backward(dh)
        return None

    def _pooled(self, h, features):
        """The cls head's input: the first token's state (B, D), then the features (B, F)."""
        F = self.config.n_features
        parts = [h[:, 0]]  # (B, D)
        if F == 0:
            if features is not None:
                raise ValueError("Encoder: features given, but the model was built with n_features=0")
        elif features is None or tuple(features.shape) != (h.shape[0], F):
            got = "none" if features is None else f"shape {tuple(features.shape)}"
            raise ValueError(f"Encoder: the cls head reads {F} features per molecule, (B, F) = ({h.shape[0]}, {F}); "
                             f"got {got}")
        else:
            parts.append(features.astype(h.dtype, copy=False))  # (B, F)
        return parts[0] if len(parts) == 1 else xp.concatenate(parts, axis=1)  # (B, D + F)


def mask_tokens(ids, mask_id: int, vocab_size: int, rng: np.random.Generator, p: float = 0.15,
                special_ids=(0, 1, 2, 3), ignore_index: int = -100):
    """BERT-style corruption for masked-language-model training (host NumPy arrays).

    Each non-special token is selected with probability ``p``. A selected token is
    replaced by ``mask_id`` 80% of the time, by a random non-special token 10% of
    the time, and kept 10% of the time. Targets hold the original id at selected
    positions and ``ignore_index`` everywhere else, so only they are scored.

    Args:
        ids: (B, T) integer NumPy array.
        mask_id: id of the MASK token. vocab_size: V.
        rng: a NumPy Generator (use ``backend.RNG.host()`` for a resumable stream).
        special_ids: ids never selected (default: the vocabulary's PAD, BOS, EOS, UNK = 0..3,
            as in :class:`~minitransformer.train.tasks.MLMTask`).

    Returns:
        corrupted (B, T) and targets (B, T), both int64 NumPy arrays.
    """
    ids = np.asarray(ids)
    special = np.isin(ids, np.asarray(list(special_ids) + [mask_id]))  # (B, T)
    selected = (rng.random(ids.shape) < p) & ~special  # (B, T)
    roll = rng.random(ids.shape)  # (B, T): which of the three fates
    corrupted = ids.copy()
    corrupted[selected & (roll < 0.8)] = mask_id
    normal = np.setdiff1d(np.arange(vocab_size), np.asarray(list(special_ids) + [mask_id]))
    use_random = selected & (roll >= 0.8) & (roll < 0.9)
    corrupted[use_random] = rng.choice(normal, size=int(use_random.sum()))
    targets = np.where(selected, ids, ignore_index).astype(np.int64)  # (B, T)
    return corrupted.astype(np.int64), targets
