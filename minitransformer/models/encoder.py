r"""``Encoder``: the bidirectional (BERT-like) transformer body. It returns states; a head reads them.

Every position attends to every non-padding position (no causal mask)::

    h = dropout(E[ids] * s + P)                      # no P with pos="relative"
    h = block_n( ... block_1(h, padding mask) )      # EncoderBlock
    h = LN_f(h)                                      # optional (default on for pre-LN)

so :math:`h = \mathrm{Encoder}(\mathrm{ids})`, shape (B, T, D), and its backward takes
:math:`\partial L / \partial h` (B, T, D) back through the same stack.

With ``pos="relative"`` (or a ``relative_bias`` beside learned/sinusoidal ``P``)
every block's self-attention adds a bidirectional relative-position bias to its logits.

The encoder has no head. The models that read its states compose it with one
(chemprop's way: message passing, aggregation and predictor are separate parts):

* :class:`~minitransformer.models.masked_lm.MaskedLM`: a masked-token head on every
  position, for pretraining;
* :class:`~minitransformer.models.property_model.PropertyModel`: a pooled head on the
  first token's state, for properties of the whole molecule.

Both may share one ``Encoder`` object: ``train property --pretrain`` trains the
masked-token model first and then fine-tunes the property model around the same encoder.
"""
from __future__ import annotations

import dataclasses

from minitransformer import backend
from minitransformer.nn.attention import padding_mask
from minitransformer.nn.embedding import TokenEmbedder, check_token_batch
from minitransformer.nn.blocks import EncoderBlock, Stack
from minitransformer.nn.config import TransformerOptions
from minitransformer.nn import LayerNorm, Module, ModuleList, set_rng


@dataclasses.dataclass(kw_only=True)
class EncoderConfig(TransformerOptions):
    """Options of :class:`Encoder`, the body alone; the rest:
    :class:`~minitransformer.nn.config.TransformerOptions`. ``tie_embeddings`` is read by
    the masked-token head (:class:`~minitransformer.models.masked_lm.MaskedTokenHead`),
    which then projects with the transposed token embedding."""

    vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)
    n_layers: int = 2
    tie_embeddings: bool = True


class Encoder(Module):
    """Bidirectional transformer encoder: ids (B, T) -> states (B, T, D)."""

    def __init__(self, config: EncoderConfig):
        self.config = c = config
        c.check_sized()
        self.rng = backend.RNG(c.seed)
        self.embed = TokenEmbedder(c.vocab_size, c.d_model, c.max_len, c.pos, c.emb_dropout, self.rng)
        self.blocks = ModuleList(EncoderBlock(c, rng=self.rng) for _ in range(c.n_layers))
        self.ln_f = LayerNorm(c.d_model) if c.final_norm else None
        self.stack = Stack(self.embed, self.blocks, self.ln_f)  # embed -> blocks -> ln_f, and back
        set_rng(self, self.rng)

    def forward(self, ids):
        """ids: (B, T) integer, right-padded with pad_id. Returns the states (B, T, D), padding keys masked."""
        check_token_batch(ids, self.config.vocab_size, self.config.max_len, "Encoder")
        mask = padding_mask(ids, self.config.pad_id)  # (B, 1, 1, T)
        self.cache = True
        return self.stack(ids, mask=mask)  # (B, T, D)

    def backward(self, dh):
        """dh: (B, T, D), the gradient of the states. Accumulates the gradients; returns None."""
        self._require_cache()
        self.stack.backward(dh)
        return None
