r"""``DecoderLM``: the decoder-only autoregressive language model (GPT-like).

It models :math:`p(x) = \prod_{t} p(x_t \mid x_{<t})` over sequences that start with
BOS: position ``t`` predicts token ``t + 1``, and a causal mask keeps it from looking
ahead::

    h = dropout(E[ids] * s + P)                       # TokenEmbedder
    h = block_n( ... block_1(h, causal & padding) )   # CausalBlock
    h = LN_f(h)                                       # optional (default on for pre-LN)
    logits = h @ W_out + b   or   h @ E^T (tied)      # (B, T, V)

With ``pos="relative"`` there is no ``P``; each block's self-attention adds a causal
bias of query-key distances, so a KV-cached :meth:`DecoderLM.step` still gives the full
forward's logits. Tied, ``E`` gets the gradients of both uses, summed.

The reference article's autoregressive model ("ARM") is ``DecoderLMConfig.tomczak()``.
"""
from __future__ import annotations

import dataclasses

from minitransformer import backend
from minitransformer.nn.attention import causal_mask, combine_masks, padding_mask
from minitransformer.nn.embedding import OutputProjection, TokenEmbedder, check_token_batch
from minitransformer.nn.softmax import CrossEntropyLoss
from minitransformer.nn.blocks import CausalBlock, Stack
from minitransformer.nn.config import TransformerOptions
from minitransformer.nn import KVCache, LayerNorm, Module, ModuleList, set_rng


@dataclasses.dataclass(kw_only=True)
class DecoderLMConfig(TransformerOptions):
    """Options of :class:`DecoderLM`; the rest: :class:`~minitransformer.nn.config.TransformerOptions`."""

    vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)
    n_layers: int = 2
    bos_id: int = 1
    eos_id: int = 2

    @classmethod
    def tomczak(cls, vocab_size: int, max_len: int = 101, **overrides) -> "DecoderLMConfig":
        """The reference ARM: 10 post-LN blocks, 4 heads as wide as D=64, dropout only on
        the embedding sum."""
        base = dict(vocab_size=vocab_size, max_len=max_len, d_model=64, n_heads=4, d_head=64,
                    n_layers=10, d_ff=256, norm="post", activation="gelu", pos="learned",
                    tie_embeddings=False, final_norm=False, emb_dropout=0.1)
        base.update(overrides)
        return cls(**base)


class DecoderLM(Module):
    """Decoder-only transformer language model (the module docstring)."""

    def __init__(self, config: DecoderLMConfig):
        self.config = c = config
        c.check_sized()
        self.rng = backend.RNG(c.seed)
        self.embed = TokenEmbedder(c.vocab_size, c.d_model, c.max_len, c.pos, c.emb_dropout, self.rng)
        self.blocks = ModuleList(CausalBlock(c, rng=self.rng) for _ in range(c.n_layers))
        self.ln_f = LayerNorm(c.d_model) if c.final_norm else None
        self.head = OutputProjection(c.d_model, c.vocab_size, c.bias, self.rng,
                                     tied_to=self.embed.tok if c.tie_embeddings else None)
        self.stack = Stack(self.embed, self.blocks, self.ln_f)  # embed -> blocks -> ln_f, and back
        set_rng(self, self.rng)

    def forward(self, ids):
        """ids: (B, T) integer, BOS first, right-padded with pad_id. Returns logits (B, T, V)."""
        check_token_batch(ids, self.config.vocab_size, self.config.max_len, "DecoderLM")
        T = ids.shape[1]
        mask = combine_masks(causal_mask(T), padding_mask(ids, self.config.pad_id))  # (B, 1, T, T)
        h = self.stack(ids, mask=mask)  # (B, T, D)
        self.cache = True
        return self.head(h)  # (B, T, V)

    def backward(self, dlogits):
        """dlogits: (B, T, V). Accumulates the gradients."""
        self._require_cache()
        self.stack.backward(self.head.backward(dlogits))  # (B, T, D) into the stack
        return None

    def log_prob(self, ids):
        """Per-sequence :math:`\\sum_t \\log p(x_{t+1} \\mid x_{\\le t})`; ids: (B, T) as in
        ``forward``. Padding targets are not counted, EOS is. Returns (B,), in the current
        mode (``eval()``: deterministic)."""
        if getattr(ids, "ndim", None) == 2 and ids.shape[1] < 2:
            raise ValueError("DecoderLM.log_prob: sequences need at least 2 tokens (BOS and one more), "
                             f"got shape {tuple(ids.shape)}")
        logits = self.forward(ids[:, :-1])  # (B, T-1, V)
        nll = CrossEntropyLoss(ignore_index=self.config.pad_id, reduction="none")(logits, ids[:, 1:])  # (B, T-1)
        return -nll.sum(axis=1)  # (B,)

    def init_state(self):
        """Empty decoding state: a KV cache per block and the next position."""
        return {"caches": [KVCache(self.config.max_len) for _ in self.blocks], "pos": 0}

    def step(self, ids_new, state):
        """Feed new tokens (B, Tn) after those in ``state`` (earlier keys and values come from
        its cache); returns the last position's logits (B, V). No backward."""
        Tn, start = ids_new.shape[1], state["pos"]
        if start + Tn > self.config.max_len:
            raise ValueError(f"DecoderLM: decoding past max_len={self.config.max_len}")
        mask = causal_mask(Tn, start + Tn)  # (Tn, start+Tn): bottom rows of the triangle
        h = self.stack(ids_new, mask=mask, offset=start, kv_caches=state["caches"])  # (B, Tn, D)
        state["pos"] = start + Tn
        return self.head(h[:, -1:])[:, 0]  # (B, V)

    def reorder_state(self, state, index):
        """Keep batch rows ``index`` of the decoding state (beam search)."""
        for kv in state["caches"]:
            kv.reorder(index)
