r"""``Encoder``: the bidirectional (BERT-like) transformer body. It returns states; a head reads them.

Every position attends to every non-padding position (no causal mask)::

    h = dropout(E[ids] * s + P)                      # no P with pos="relative"
    h = block_n( ... block_1(h, padding mask) )      # EncoderBlock
    h = LN_f(h)                                      # optional (default on for pre-LN)

so :math:`h = \mathrm{Encoder}(\mathrm{ids})`, shape (B, T, D), and its backward takes
:math:`\partial L / \partial h` (B, T, D) back through the same stack.

With ``pos="relative"`` (or a ``relative_bias`` beside learned/sinusoidal ``P``)
every block's self-attention adds a bidirectional relative-position bias to its logits.
With ``graph_max_distance`` > 0 every block's self-attention also adds a graph bias
(:mod:`minitransformer.nn.graph_bias`): a learned number per head and relation of two
tokens in the molecule (bonds apart, bond type, non-atom tokens:
:mod:`minitransformer.chem.graph`), and ``forward`` takes each molecule's relations.

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
from minitransformer.chem.graph import n_relations
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
    which then projects with the transposed token embedding. ``graph_max_distance``: 0 (no
    graph bias), or the distance in bonds at which the graph relations are clipped (>= 2)."""

    vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)
    n_layers: int = 2
    tie_embeddings: bool = True
    graph_max_distance: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.graph_max_distance == 1:
            raise ValueError("EncoderConfig.graph_max_distance must be 0 (no graph bias) or at least 2, got 1")

    @property
    def graph_relations(self) -> int:
        """R, the graph bias's relations (0: none)."""
        return n_relations(self.graph_max_distance) if self.graph_max_distance else 0


class Encoder(Module):
    """Bidirectional transformer encoder: ids (B, T) -> states (B, T, D)."""

    def __init__(self, config: EncoderConfig):
        self.config = c = config
        c.check_sized()
        self.rng = backend.RNG(c.seed)
        self.embed = TokenEmbedder(c.vocab_size, c.d_model, c.max_len, c.pos, c.emb_dropout, self.rng)
        self.blocks = ModuleList(EncoderBlock(c, rng=self.rng, graph_relations=c.graph_relations)
                                 for _ in range(c.n_layers))
        self.ln_f = LayerNorm(c.d_model) if c.final_norm else None
        self.stack = Stack(self.embed, self.blocks, self.ln_f)  # embed -> blocks -> ln_f, and back
        set_rng(self, self.rng)

    def forward(self, ids, relations=None):
        """ids: (B, T) integer, right-padded with pad_id; relations: (B, T, T) graph relation codes,
        given exactly when the encoder has a graph bias. Returns the states (B, T, D), padding keys masked."""
        check_token_batch(ids, self.config.vocab_size, self.config.max_len, "Encoder")
        if (relations is None) != (self.config.graph_max_distance == 0):
            raise ValueError("Encoder: " + ("this encoder has a graph bias; give each molecule's relations (B, T, T) "
                                            "(minitransformer.chem.graph.relation_batch)" if relations is None else
                                            "relations were given, but this encoder has no graph bias"))
        if relations is not None and tuple(relations.shape) != (*ids.shape, ids.shape[1]):
            raise ValueError(f"Encoder: relations must have shape (B, T, T) = {(*ids.shape, ids.shape[1])}, got "
                             f"{tuple(relations.shape)}")
        mask = padding_mask(ids, self.config.pad_id)  # (B, 1, 1, T)
        self.cache = True
        graph = {} if relations is None else {"relations": relations}
        return self.stack(ids, mask=mask, **graph)  # (B, T, D)

    def backward(self, dh):
        """dh: (B, T, D), the gradient of the states. Accumulates the gradients; returns None."""
        self._require_cache()
        self.stack.backward(dh)
        return None
