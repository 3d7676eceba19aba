r"""``LSTMLM``: a recurrent language model over token sequences (CharRNN-style), the
baseline a transformer language model is measured against.

It models the same :math:`p(x) = \prod_t p(x_t \mid x_{<t})` as
:class:`~minitransformer.models.DecoderLM`, with the same ids and special tokens, but
what position ``t`` knows of the past is the LSTM's state, carried from token to token,
not attention over every earlier position::

    h = E[ids]                                   # (B, T, D) token embedding, no positions:
    h = lstm_n( ... lstm_1(h, mask) )            # the recurrence itself orders the tokens
    logits = h @ W_out + b                       # (B, T, V)

Padding (``pad_id``) is masked in every layer: a padded step keeps the state and gets
no gradient (:mod:`minitransformer.nn.lstm`). Decoding carries each layer's
``(h, c)`` from call to call (:meth:`LSTMLM.step`), the part a transformer's KV cache
plays, at a constant cost per token; a step gives the full forward's logits exactly.
"""
from __future__ import annotations

import dataclasses

from minitransformer import backend
from minitransformer.nn.embedding import Embedding, check_token_batch
from minitransformer.nn.linear import Linear
from minitransformer.nn.lstm import LSTM, RecurrentOptions
from minitransformer.nn import Module, ModuleList, set_rng


@dataclasses.dataclass(kw_only=True)
class LSTMLMConfig(RecurrentOptions):
    """Options of :class:`LSTMLM`: the vocabulary V; the rest as
    :class:`~minitransformer.nn.lstm.RecurrentOptions`."""

    vocab_size: int | None = dataclasses.field(kw_only=False)  # None: not yet known (check_sized)


class LSTMLM(Module):
    """Recurrent language model. See the module docstring."""

    def __init__(self, config: LSTMLMConfig):
        self.config = c = config
        c.check_sized()
        self.rng = backend.RNG(c.seed)
        self.embed = Embedding(c.vocab_size, c.d_model, init_std=0.1, rng=self.rng)
        self.layers = ModuleList(LSTM(c.d_model if i == 0 else c.hidden, c.hidden, rng=self.rng)
                                 for i in range(c.n_layers))
        self.head = Linear(c.hidden, c.vocab_size, rng=self.rng)
        set_rng(self, self.rng)

    def _run(self, ids, states=None):
        """Embedding, the layers (from ``states``, one (h, c) per layer, or zeros), the head."""
        mask = ids != self.config.pad_id  # (B, T): padded steps keep the state
        h = self.embed(ids)  # (B, T, D)
        for i, layer in enumerate(self.layers):
            h = layer(h, mask, None if states is None else states[i])  # (B, T, H)
        return self.head(h)  # (B, T, V)

    def forward(self, ids):
        """ids: (B, T) integer, BOS first, right-padded with pad_id. Returns logits (B, T, V)."""
        check_token_batch(ids, self.config.vocab_size, self.config.max_len, "LSTMLM")
        self.cache = True
        return self._run(ids)

    def backward(self, dlogits):
        """dlogits: (B, T, V). Accumulates every parameter's gradient; returns None."""
        self._require_cache()
        dh = self.head.backward(dlogits)  # (B, T, H)
        for layer in reversed(self.layers):
            dh = layer.backward(dh)  # (B, T, D or H)
        self.embed.backward(dh)
        return None

    # -- decoding: the recurrent state in the place of the KV cache ---------------
    def init_state(self):
        """Empty decoding state: no (h, c) yet (zeros), and the next position."""
        return {"states": None, "pos": 0}

    def step(self, ids_new, state):
        """Feed new tokens (B, Tn) after those already in ``state``; returns the logits of
        the last new position (B, V). Inference only: no backward."""
        Tn, start = ids_new.shape[1], state["pos"]
        if start + Tn > self.config.max_len:
            raise ValueError(f"LSTMLM: decoding past max_len={self.config.max_len}")
        logits = self._run(ids_new, state["states"])  # (B, Tn, V)
        state["states"] = [layer.final_state for layer in self.layers]
        state["pos"] = start + Tn
        return logits[:, -1]  # (B, V)

    def reorder_state(self, state, index):
        """Keep batch rows ``index`` of the decoding state (beam search)."""
        if state["states"] is not None:
            state["states"] = [(h[index], c[index]) for h, c in state["states"]]
