r"""``MaskedLM``: an :class:`~minitransformer.models.encoder.Encoder` with a masked-token head,
for pretraining (BERT's masked language model).

Some tokens of each molecule are hidden (:func:`mask_tokens`, the 80/10/10 rule) and
every position predicts the token that stood there::

    h = Encoder(ids)                                 # (B, T, D)
    logits = h @ W + b   or   h @ E^T (tied)         # (B, T, V): MaskedTokenHead

Only the hidden positions are scored (:class:`~minitransformer.train.tasks.MLMTask`).
Tied (``tie_embeddings``), the head reuses the encoder's token embedding ``E``
(:class:`~minitransformer.nn.embedding.OutputProjection`), and ``E`` gets the gradients
of both uses, summed.

``MaskedLM(config, encoder=model.encoder)`` wraps an encoder that already exists, so
that what pretraining teaches it is what another model built around the same
object, such as a :class:`~minitransformer.models.property_model.PropertyModel`, starts from.
"""
from __future__ import annotations

import numpy as np

from minitransformer.models.encoder import Encoder, EncoderConfig
from minitransformer.nn.embedding import Embedding, OutputProjection
from minitransformer.nn import Module


class MaskedTokenHead(Module):
    r"""Logits over the vocabulary at every position: :math:`z = h W + b`, or
    :math:`z = h E^\top` when tied to the token embedding :math:`E` (V, D).

    Backward: :math:`\partial L/\partial h = \partial L/\partial z\, W^\top`, and
    :math:`\partial L/\partial W = h^\top \partial L/\partial z` (tied:
    :math:`\partial L/\partial E \mathrel{+}= (\partial L/\partial z)^\top h`, added to the
    lookup's own gradient), all by :class:`~minitransformer.nn.embedding.OutputProjection`.
    """

    def __init__(self, config: EncoderConfig, rng, tied_to: Embedding | None = None):
        self.config = c = config
        self.proj = OutputProjection(c.d_model, c.vocab_size, c.bias, rng, tied_to=tied_to)

    def forward(self, h):
        """h: (B, T, D) -> logits (B, T, V)."""
        if getattr(h, "ndim", None) != 3 or h.shape[-1] != self.config.d_model:
            raise ValueError(f"MaskedTokenHead: h must have shape (B, T, D={self.config.d_model}), got "
                             f"{tuple(getattr(h, 'shape', ()))}; give it the encoder's states")
        self.cache = True
        return self.proj(h)  # (B, T, V)

    def backward(self, dlogits):
        """dlogits: (B, T, V) -> dh (B, T, D); accumulates the projection's gradients."""
        self._require_cache()
        return self.proj.backward(dlogits)  # (B, T, D)


class MaskedLM(Module):
    """Encoder + masked-token head: ids (B, T) -> logits (B, T, V) (the module docstring)."""

    def __init__(self, config: EncoderConfig, encoder: Encoder | None = None):
        if encoder is not None and encoder.config != config:
            raise ValueError("MaskedLM: the encoder given was built with another config; pass encoder.config "
                             "as the config")
        self.config = c = config
        self.encoder = Encoder(c) if encoder is None else encoder
        self.rng = self.encoder.rng  # one random stream for the encoder's dropouts and the head's init
        self.head = MaskedTokenHead(c, self.rng, tied_to=self.encoder.embed.tok if c.tie_embeddings else None)

    def forward(self, ids, relations=None):
        """ids: (B, T) integer, right-padded with pad_id; relations: (B, T, T), the graph bias's
        codes of the uncorrupted writing (an encoder with a graph bias: the bonds stay known, the
        masked atoms are to be named). Returns logits (B, T, V)."""
        self.cache = True
        return self.head(self.encoder(ids, relations))  # (B, T, V)

    def backward(self, dlogits):
        """dlogits: (B, T, V). Accumulates the gradients of the head and the encoder; returns None."""
        self._require_cache()
        self.encoder.backward(self.head.backward(dlogits))  # (B, T, D) into the encoder
        return None


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
