r"""``Seq2Seq``: the encoder-decoder transformer (translation-style).

::

    memory = Encoder(src)                                  # (B, S, D), padding-masked
    h      = dropout(E_tgt[tgt_in] * s + P)                # (B, T, D)
    h      = dec_block_n(... dec_block_1(h, causal & tgt padding,
                                        context=memory, context_mask=src padding))
    logits = LN_f(h) @ W_out  (or @ E_tgt^T when tied)     # (B, T, V)

Each decoder block attends causally to the target prefix and, through
cross-attention, to the whole source; the source padding mask applies there.
With ``pos="relative"`` (no ``P`` in either embedder) or a ``relative_bias``
beside ``P``, the self-attention of every encoder block (bidirectional) and
decoder block (causal) adds a relative-position bias; cross-attention has none.
The memory's gradient is the sum of every decoder block's cross-attention
context gradient, which then flows back through the encoder. With
``share_embeddings`` source and target use one token table (one vocabulary), and
that table collects gradients from both lookups (and from the output
projection too, if ``tie_embeddings``).

With ``pointer`` the output is a pointer-generator's (:mod:`minitransformer.nn.pointer`):
the log-probabilities of the generator's softmax mixed, by a gate, with an attention that
points at the source tokens, so a step may copy a source token instead of spelling it::

    out = log( g softmax(logits) + (1 - g) attention(h, memory) one_hot(src) )   # (B, T, V)

(one vocabulary on both sides; the cross-entropy reads ``out`` as logits).
"""
from __future__ import annotations

import dataclasses

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.attention import causal_mask, combine_masks, padding_mask
from minitransformer.nn.embedding import OutputProjection, TokenEmbedder, check_token_batch
from minitransformer.nn.blocks import DecoderBlock, EncoderBlock, Stack
from minitransformer.nn.config import TransformerOptions
from minitransformer.nn import KVCache, LayerNorm, Module, ModuleList, set_rng
from minitransformer.nn.pointer import PointerHead, source_one_hot


@dataclasses.dataclass(kw_only=True)
class Seq2SeqConfig(TransformerOptions):
    """Options of :class:`Seq2Seq` (shared options: :class:`~minitransformer.nn.blocks.TransformerOptions`)."""

    src_vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)
    tgt_vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)
    pos: str = "sinusoidal"
    n_enc_layers: int = 2
    n_dec_layers: int = 2
    share_embeddings: bool = False
    pointer: bool = False
    bos_id: int = 1
    eos_id: int = 2

    def __post_init__(self):
        super().__post_init__()
        for option in ("share_embeddings", "pointer"):
            if getattr(self, option) and self.src_vocab_size != self.tgt_vocab_size:
                raise ValueError(
                    f"Seq2SeqConfig: {option} needs one vocabulary, but src_vocab_size="
                    f"{self.src_vocab_size} != tgt_vocab_size={self.tgt_vocab_size}"
                )


class Seq2Seq(Module):
    """Encoder-decoder transformer. See the module docstring."""

    def __init__(self, config: Seq2SeqConfig):
        self.config = c = config
        c.check_sized()
        self.rng = backend.RNG(c.seed)
        self.src_embed = TokenEmbedder(c.src_vocab_size, c.d_model, c.max_len, c.pos, c.emb_dropout, self.rng)
        self.enc_blocks = ModuleList(EncoderBlock(c, rng=self.rng) for _ in range(c.n_enc_layers))
        self.enc_ln = LayerNorm(c.d_model) if c.final_norm else None
        self.tgt_embed = TokenEmbedder(c.tgt_vocab_size, c.d_model, c.max_len, c.pos, c.emb_dropout,
                                       self.rng,
                                       shared_weight=self.src_embed.tok.weight if c.share_embeddings else None)
        self.dec_blocks = ModuleList(DecoderBlock(c, rng=self.rng) for _ in range(c.n_dec_layers))
        self.dec_ln = LayerNorm(c.d_model) if c.final_norm else None
        self.head = OutputProjection(c.d_model, c.tgt_vocab_size, c.bias, self.rng,
                                     tied_to=self.tgt_embed.tok if c.tie_embeddings else None)
        self.pointer = PointerHead(c.d_model, self.rng) if c.pointer else None
        self.enc_stack = Stack(self.src_embed, self.enc_blocks, self.enc_ln)
        self.dec_stack = Stack(self.tgt_embed, self.dec_blocks, self.dec_ln)
        set_rng(self, self.rng)

    # -- encoder -----------------------------------------------------------------
    def encode(self, src):
        """src (B, S) -> memory (B, S, D) and the source key mask (B, 1, 1, S)."""
        check_token_batch(src, self.config.src_vocab_size, self.config.max_len, "Seq2Seq source")
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        return self.enc_stack(src, mask=src_mask), src_mask  # (B, S, D), (B, 1, 1, S)

    # -- training-time forward / backward ---------------------------------------
    def forward(self, src, tgt_in):
        """src (B, S), tgt_in (B, T) (BOS first, right-padded) -> logits (B, T, V_tgt) (with
        ``pointer``: log-probabilities, which a cross-entropy reads as logits)."""
        check_token_batch(tgt_in, self.config.tgt_vocab_size, self.config.max_len, "Seq2Seq target")
        if tgt_in.shape[0] != getattr(src, "shape", (None,))[0]:
            raise ValueError(f"Seq2Seq: src has {getattr(src, 'shape', (None,))[0]} rows but tgt_in has "
                             f"{tgt_in.shape[0]}; give one target per source")
        memory, src_mask = self.encode(src)  # (B, S, D)
        T = tgt_in.shape[1]
        tgt_mask = combine_masks(causal_mask(T), padding_mask(tgt_in, self.config.pad_id))  # (B, 1, T, T)
        h = self.dec_stack(tgt_in, mask=tgt_mask, context=memory, context_mask=src_mask)  # (B, T, D)
        self.cache = memory.shape
        logits = self.head(h)  # (B, T, V)
        if self.pointer is None:
            return logits
        copy = source_one_hot(src, self.config.tgt_vocab_size, logits.dtype)  # (B, S, V)
        return self.pointer(h, logits, memory, copy, src_mask[:, 0])  # (B, T, V) log p

    def backward(self, dout):
        """dout (B, T, V), the gradient of what forward returned. Accumulates all gradients;
        returns None."""
        mem_shape = self._require_cache()
        if self.pointer is None:
            dh, dmem_copy = self.head.backward(dout), None  # (B, T, D)
        else:
            dh_copy, dlogits, dmem_copy = self.pointer.backward(dout)  # (B, T, D), (B, T, V), (B, S, D)
            dh = self.head.backward(dlogits) + dh_copy  # (B, T, D)
        dmem = self.dec_stack.backward(dh, context_shape=mem_shape)  # (B, S, D)
        if dmem_copy is not None:
            dmem += dmem_copy  # (B, S, D): the copy attention read the memory too
        self.enc_stack.backward(dmem)
        return None

    # -- incremental decoding ------------------------------------------------------
    def init_state(self, src):
        """Encode ``src`` once; return the decoding state (memory, masks, KV caches).
        The cross-attention keys/values are computed on the first step and reused."""
        memory, src_mask = self.encode(src)
        copy = keys = None
        if self.pointer is not None:  # the one-hot source and the memory's keys, once for every step
            copy, keys = source_one_hot(src, self.config.tgt_vocab_size, memory.dtype), self.pointer.key(memory)
        return {"memory": memory, "src_mask": src_mask, "copy": copy, "copy_keys": keys, "pos": 0,
                "caches": [KVCache(self.config.max_len) for _ in self.dec_blocks],
                "cross": [KVCache() for _ in self.dec_blocks]}

    def step(self, ids_new, state):
        """Feed new target tokens (B, Tn); return logits of the last one (B, V)."""
        Tn, start = ids_new.shape[1], state["pos"]
        if start + Tn > self.config.max_len:
            raise ValueError(f"Seq2Seq: decoding past max_len={self.config.max_len}")
        mask = causal_mask(Tn, start + Tn)  # (Tn, start+Tn)
        h = self.dec_stack(ids_new, mask=mask, offset=start, kv_caches=state["caches"], context=state["memory"],
                           context_mask=state["src_mask"], cross_caches=state["cross"])  # (B, Tn, D)
        state["pos"] = start + Tn
        h = h[:, -1:]  # (B, 1, D)
        logits = self.head(h)  # (B, 1, V)
        if self.pointer is not None:
            logits = self.pointer(h, logits, state["memory"], state["copy"], state["src_mask"][:, 0],
                                  keys=state["copy_keys"])  # (B, 1, V) log p
        return logits[:, 0]  # (B, V)

    def reorder_state(self, state, index):
        """Keep batch rows ``index`` (beam search)."""
        state["memory"] = state["memory"][index]
        state["src_mask"] = state["src_mask"][index]
        if state.get("copy") is not None:
            state["copy"], state["copy_keys"] = state["copy"][index], state["copy_keys"][index]
        for kv in state["caches"] + state["cross"]:
            kv.reorder(index)
