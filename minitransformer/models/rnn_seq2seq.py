r"""``RNNSeq2Seq``: the attentional LSTM encoder-decoder, the model the transformer replaced.

Luong et al. (2015), "global attention" without input feeding. The encoder's LSTMs read
the source; the decoder's LSTMs start from the encoder's final states and read the target
so far; at every target step the decoder's top state :math:`s_t` attends over the
encoder's top states :math:`E` (:mod:`minitransformer.nn.rnn_attention`, additive or
multiplicative), and the context and the state together make the prediction::

    E = lstm_enc( src_embed[src] )                     # (B, S, H), padding masked
    S = lstm_dec( tgt_embed[tgt], from the encoder's final (h, c) of each layer )  # (B, T, H)
    ctx_t, alpha_t = attention(S[:, t], E, src != PAD)  # (B, H), (B, S), for every t
    a_t = tanh([S_t ; ctx_t] W_c + b_c)                 # (B, T, H): Luong's attentional state
    logits = a W_out + b_out                            # (B, T, V_tgt)

Without input feeding the decoder's states do not depend on the attention, so the
decoder's LSTMs run over the whole target at once, and the attention then step by step.
The backward runs the same way in reverse, and the gradient of every decoder layer's
initial state flows into the encoder layer whose final state it was. Decoding carries the
decoder's (h, c) and the encoded source (:meth:`RNNSeq2Seq.init_state`, :meth:`RNNSeq2Seq.step`).
"""
from __future__ import annotations

import dataclasses

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn import Module, ModuleList, set_rng
from minitransformer.nn.embedding import Embedding, check_token_batch
from minitransformer.nn.linear import Linear
from minitransformer.nn.lstm import LSTM, RecurrentOptions
from minitransformer.nn.rnn_attention import EncoderAttention


@dataclasses.dataclass(kw_only=True)
class RNNSeq2SeqConfig(RecurrentOptions):
    """Options of :class:`RNNSeq2Seq`: the two vocabularies, and ``attention``,
    ``"additive"`` (Bahdanau's) or ``"multiplicative"`` (Luong's); the rest as
    :class:`~minitransformer.nn.lstm.RecurrentOptions` (``hidden`` is the encoder's and
    the decoder's state width)."""

    src_vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)
    tgt_vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)
    attention: str = "additive"

    def __post_init__(self):
        super().__post_init__()
        self._check_choice("attention", ("additive", "multiplicative"))


class RNNSeq2Seq(Module):
    """Attentional LSTM encoder-decoder. See the module docstring."""

    def __init__(self, config: RNNSeq2SeqConfig):
        self.config = c = config
        c.check_sized()
        self.rng = backend.RNG(c.seed)
        D, H = c.d_model, c.hidden
        self.src_embed = Embedding(c.src_vocab_size, D, init_std=0.1, rng=self.rng)
        self.encoder = ModuleList(LSTM(D if i == 0 else H, H, rng=self.rng) for i in range(c.n_layers))
        self.tgt_embed = Embedding(c.tgt_vocab_size, D, init_std=0.1, rng=self.rng)
        self.decoder = ModuleList(LSTM(D if i == 0 else H, H, rng=self.rng) for i in range(c.n_layers))
        self.attention = EncoderAttention(c.attention, H, H, rng=self.rng)
        self.combine = Linear(2 * H, H, rng=self.rng)  # [s_t ; ctx_t] -> the attentional state
        self.head = Linear(H, c.tgt_vocab_size, rng=self.rng)
        set_rng(self, self.rng)

    # -- encoder -----------------------------------------------------------------
    def encode(self, src):
        """src (B, S) -> E (B, S, H), the source mask (B, S) and each layer's final (h, c)."""
        check_token_batch(src, self.config.src_vocab_size, self.config.max_len, "RNNSeq2Seq source")
        mask = src != self.config.pad_id  # (B, S): True at real tokens
        h = self.src_embed(src)  # (B, S, D)
        finals = []
        for layer in self.encoder:
            h = layer(h, mask)  # (B, S, H)
            finals.append(layer.final_state)
        return h, mask, finals

    # -- decoder -----------------------------------------------------------------
    def _decode(self, tgt, E, src_mask, states, keys=None):
        """Logits (B, T, V) of the target ``tgt`` (B, T) from ``states`` (one (h, c) per
        decoder layer), and what the backward needs: each step's attention cache, the
        additive keys' cache (or None) and the attentional states a (B, T, H). ``keys``: the
        attention's ``(K, keys_cache)`` of E, if already computed (incremental decoding)."""
        h = self.tgt_embed(tgt)  # (B, T, D)
        tgt_mask = tgt != self.config.pad_id  # (B, T)
        for layer, state in zip(self.decoder, states):
            h = layer(h, tgt_mask, state)  # (B, T, H)
        K, keys_cache = self.attention.keys(E) if keys is None else keys  # (B, S, A) once for every step, or None
        steps = [self.attention.step_forward(h[:, t], E, src_mask, keys=K) for t in range(h.shape[1])]
        ctx = xp.stack([ctx_t for (ctx_t, _), _ in steps], axis=1)  # (B, T, H)
        a = xp.tanh(self.combine(xp.concatenate([h, ctx], axis=-1)))  # (B, T, H)
        return self.head(a), ([cache for _, cache in steps], keys_cache, a)

    # -- training-time forward / backward ---------------------------------------
    def forward(self, src, tgt_in):
        """src (B, S), tgt_in (B, T) (BOS first, right-padded) -> logits (B, T, V_tgt)."""
        check_token_batch(tgt_in, self.config.tgt_vocab_size, self.config.max_len, "RNNSeq2Seq target")
        if tgt_in.shape[0] != getattr(src, "shape", (None,))[0]:
            raise ValueError(f"RNNSeq2Seq: src has {getattr(src, 'shape', (None,))[0]} rows but tgt_in has "
                             f"{tgt_in.shape[0]}; give one target per source")
        E, src_mask, finals = self.encode(src)
        logits, decoded = self._decode(tgt_in, E, src_mask, finals)
        self.cache = (E.shape, decoded)
        return logits  # (B, T, V)

    def backward(self, dlogits):
        """dlogits (B, T, V). Accumulates every parameter's gradient; returns None."""
        E_shape, (attn_caches, keys_cache, a) = self._require_cache()
        H = self.config.hidden
        da = self.head.backward(dlogits) * (1.0 - a * a)  # (B, T, H), through the tanh
        dcat = self.combine.backward(da)  # (B, T, 2H)
        dh = dcat[..., :H].copy()  # (B, T, H) the decoder's top states
        dE = xp.zeros(E_shape, dtype=dlogits.dtype)  # (B, S, H)
        dK = None  # (B, S, A): the additive keys' gradient, summed over the steps
        for t, cache in enumerate(attn_caches):
            ds, dE_t, dK_t = self.attention.step_backward(dcat[:, t, H:], cache)  # (B, H), (B, S, H), (B, S, A)
            dh[:, t] += ds
            dE += dE_t
            if dK_t is None:  # multiplicative attention: no keys
                continue
            if dK is None:
                dK = dK_t  # a fresh array of the step's backward: summed into in place
            else:
                dK += dK_t
        if dK is not None:
            dE += self.attention.keys_backward(dK, keys_cache)  # (B, S, H): the keys' share, once
        for layer in reversed(self.decoder):
            dh = layer.backward(dh)  # (B, T, H or D)
        self.tgt_embed.backward(dh)
        for enc, dec in zip(reversed(self.encoder), reversed(self.decoder)):
            dE = enc.backward(dE, dfinal=dec.dinitial)  # its final state began the decoder layer
        self.src_embed.backward(dE)
        return None

    def attention_weights(self):
        """The attention weights of the last forward pass, (B, T, S): at each target step, how
        much each source position weighed (the pictures of ``minitransformer attention``)."""
        _, (attn_caches, _, _) = self._require_cache()
        return xp.stack([cache.alpha.p for cache in attn_caches], axis=1)  # (B, T, S)

    # -- incremental decoding ------------------------------------------------------
    def init_state(self, src):
        """Encode ``src`` once; the decoding state: E, its attention keys, the source mask, the
        decoder's (h, c)."""
        E, mask, finals = self.encode(src)
        return {"E": E, "keys": self.attention.keys(E), "src_mask": mask, "states": finals, "pos": 0}

    def step(self, ids_new, state):
        """Feed new target tokens (B, Tn); return the logits of the last one (B, V)."""
        Tn, start = ids_new.shape[1], state["pos"]
        if start + Tn > self.config.max_len:
            raise ValueError(f"RNNSeq2Seq: decoding past max_len={self.config.max_len}")
        logits, _ = self._decode(ids_new, state["E"], state["src_mask"], state["states"],
                                 state["keys"])  # (B, Tn, V)
        state["states"] = [layer.final_state for layer in self.decoder]
        state["pos"] = start + Tn
        return logits[:, -1]  # (B, V)

    def reorder_state(self, state, index):
        """Keep batch rows ``index`` (beam search)."""
        state["E"], state["src_mask"] = state["E"][index], state["src_mask"][index]
        K, keys_cache = state["keys"]
        if K is not None:  # the kept rows' keys, as they are (no product again)
            state["keys"] = (K[index], keys_cache._replace(E=state["E"]))  # (B', S, A)
        state["states"] = [(h[index], c[index]) for h, c in state["states"]]
