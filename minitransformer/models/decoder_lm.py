r"""``DecoderLM``: the decoder-only autoregressive language model (GPT-like).

It models :math:`p(x) = \prod_{t} p(x_t \mid x_{<t})` over token sequences that
start with a BOS token. The forward pass maps ids (B, T) to next-token logits
(B, T, V): position ``t`` predicts token ``t + 1``, and a causal mask keeps it
from looking ahead::

    h = dropout(E[ids] * s + P)                       # TokenEmbedder
    h = block_n( ... block_1(h, causal & padding) )   # DecoderBlock, no cross-attention
    h = LN_f(h)                                       # optional (default on for pre-LN)
    logits = h @ W_out + b   or   h @ E^T (tied)      # (B, T, V)

Positions (``pos``): learned or sinusoidal vectors ``P``, or ``"relative"``: no
``P``, and every block's self-attention adds a causal relative-position bias
(``relative_bias``: learned or ALiBi) to its logits; a bias can also be added
beside ``P``. The bias depends only on query-key distances, so a KV-cached
:meth:`DecoderLM.step` gives the same logits as the full forward pass.

With ``tie_embeddings=True`` the output projection *is* the token embedding
matrix, so that matrix receives two gradient contributions, one from the
lookup at the bottom and one from the projection at the top; the backward adds
both into the same ``Parameter.grad``.

This is the autoregressive model ("ARM") of the reference article; its exact
setting is ``DecoderLMConfig.tomczak()``.
"""
from __future__ import annotations

import dataclasses

from minitransformer import backend
from minitransformer.nn.attention import causal_mask, combine_masks, padding_mask
from minitransformer.nn.embedding import OutputProjection, TokenEmbedder, check_token_batch
from minitransformer.nn.softmax import CrossEntropyLoss
from minitransformer.nn.blocks import TransformerOptions
from minitransformer.nn import DecoderBlock, KVCache, LayerNorm, Module, ModuleList, set_rng


@dataclasses.dataclass(kw_only=True)
class DecoderLMConfig(TransformerOptions):
    """Options of :class:`DecoderLM`; shared options: :class:`~minitransformer.nn.blocks.TransformerOptions`."""

    vocab_size: int = dataclasses.field(kw_only=False)
    n_layers: int = 2
    bos_id: int = 1
    eos_id: int = 2

    @classmethod
    def tomczak(cls, vocab_size: int, max_len: int = 101, **overrides) -> "DecoderLMConfig":
        """The reference ARM: D=64, 4 heads of width 64, 10 post-LN blocks, MLP 64-256-64
        with GELU, dropout 0.1 on the embedding sum only, learned positions, untied."""
        base = dict(vocab_size=vocab_size, max_len=max_len, d_model=64, n_heads=4, d_head=64,
                    n_layers=10, d_ff=256, norm="post", activation="gelu", pos="learned",
                    tie_embeddings=False, final_norm=False, emb_dropout=0.1)
        base.update(overrides)
        return cls(**base)


class DecoderLM(Module):
    """Decoder-only transformer language model. See the module docstring."""

    def __init__(self, config: DecoderLMConfig):
        self.config = c = config
        self.rng = backend.RNG(c.seed)
        self.embed = TokenEmbedder(c.vocab_size, c.d_model, c.max_len, c.pos, c.emb_dropout, self.rng)
        self.blocks = ModuleList(
            DecoderBlock(c.d_model, c.n_heads, c.d_ff, c.d_head, norm=c.norm, activation=c.activation,
                         attn_dropout=c.attn_dropout, resid_dropout=c.resid_dropout,
                         ff_dropout=c.ff_dropout, bias=c.bias, rng=self.rng, cross_attention=False,
                         relative_bias=c.relative_bias, relative_max_distance=c.relative_max_distance)
            for _ in range(c.n_layers)
        )
        self.ln_f = LayerNorm(c.d_model) if c.final_norm else None
        self.head = OutputProjection(c.d_model, c.vocab_size, c.bias, self.rng,
                                     tied_to=self.embed.tok if c.tie_embeddings else None)
        set_rng(self, self.rng)

    # -- training-time forward / backward ---------------------------------------
    def forward(self, ids):
        """ids: (B, T) integer, BOS first, right-padded with pad_id. Returns logits (B, T, V)."""
        check_token_batch(ids, self.config.vocab_size, self.config.max_len, "DecoderLM")
        T = ids.shape[1]
        mask = combine_masks(causal_mask(T), padding_mask(ids, self.config.pad_id))  # (B, 1, T, T)
        h = self.embed(ids)  # (B, T, D)
        for block in self.blocks:
            h = block(h, mask=mask)  # (B, T, D)
        if self.ln_f is not None:
            h = self.ln_f(h)
        self.cache = True
        return self.head(h)  # (B, T, V)

    def backward(self, dlogits):
        """dlogits: (B, T, V). Accumulates every parameter's gradient; returns None."""
        self._require_cache()
        dh = self.head.backward(dlogits)  # (B, T, D)
        if self.ln_f is not None:
            dh = self.ln_f.backward(dh)
        for block in reversed(list(self.blocks)):
            dh = block.backward(dh)
        self.embed.backward(dh)
        return None

    def log_prob(self, ids):
        """Per-sequence log-likelihood :math:`\\sum_t \\log p(x_{t+1} \\mid x_{\\le t})`.

        ids: (B, T) with BOS first, right-padded. Padding targets are not counted;
        the EOS target is. Returns (B,) on the device. Runs in the current mode
        (call ``eval()`` first for deterministic values).
        """
        if getattr(ids, "ndim", None) == 2 and ids.shape[1] < 2:
            raise ValueError("DecoderLM.log_prob: sequences need at least 2 tokens (BOS and one more), "
                             f"got shape {tuple(ids.shape)}")
        logits = self.forward(ids[:, :-1])  # (B, T-1, V)
        nll = CrossEntropyLoss(ignore_index=self.config.pad_id, reduction="none")(logits, ids[:, 1:])  # (B, T-1)
        return -nll.sum(axis=1)  # (B,)

    # -- incremental decoding with a KV cache -----------------------------------
    def init_state(self):
        """Empty decoding state: one KV cache per block and the next position."""
        return {"caches": [KVCache() for _ in self.blocks], "pos": 0}

    def step(self, ids_new, state):
        """Feed new tokens (B, Tn) after those already in ``state``; returns logits of the
        last new position (B, V). Only the new tokens are computed (keys and values of
        earlier positions come from the cache). Inference only: no backward."""
        Tn, start = ids_new.shape[1], state["pos"]
        if start + Tn > self.config.max_len:
            raise ValueError(f"DecoderLM: decoding past max_len={self.config.max_len}")
        mask = causal_mask(Tn, start + Tn)  # (Tn, start+Tn): bottom rows of the triangle
        h = self.embed(ids_new, offset=start)  # (B, Tn, D)
        for block, kv in zip(self.blocks, state["caches"]):
            h = block(h, mask=mask, kv_cache=kv)
        if self.ln_f is not None:
            h = self.ln_f(h)
        state["pos"] = start + Tn
        return self.head(h[:, -1:])[:, 0]  # (B, V)

    def reorder_state(self, state, index):
        """Keep batch rows ``index`` of the decoding state (beam search)."""
        for kv in state["caches"]:
            kv.reorder(index)
