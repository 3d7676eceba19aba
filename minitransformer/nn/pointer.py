r"""The copy (pointer) mechanism: a decoder that may point at a source token instead of spelling it.

A pointer-generator network (See, Liu and Manning, 2017) mixes two distributions over
the target vocabulary at every step: the generator's softmax over its logits, and a
copy distribution that an attention over the source positions puts on the tokens found
there. A gate says how much of each::

    p_vocab = softmax(logits)                               # (B, T, V) the generator
    a       = softmax(q k^T / sqrt(D), source padding)      # (B, T, S)  q = h W_q, k = memory W_k
    p_copy  = a C                                           # (B, T, V)  C (B, S, V): one-hot source ids
    g       = sigmoid(h w_g + b_g)                          # (B, T, 1)  how much to generate
    p       = g p_vocab + (1 - g) p_copy                    # (B, T, V)
    out     = log p                                         # (B, T, V)

The output is a log-probability, so the usual cross-entropy reads it as logits:
:math:`\log\mathrm{softmax}(\log p) = \log p - \log\sum_v p_v = \log p`, and its
gradient :math:`\mathrm{softmax}(\log p) - q = p - q` is the one a mixture should get.
Canonicalizing a SMILES is mostly reordering its tokens: every target atom is a source
atom, and pointing at it is easier to learn than spelling it (``docs/kernels/pointer.md``).

Backward, with :math:`\delta = \partial L / \partial \mathrm{out}` and
:math:`dp = \delta / p`:

.. math::
    dg = \sum_v dp_v\,(p^{vocab}_v - p^{copy}_v), \quad
    dz = dg\, g (1 - g), \quad
    d\mathrm{logits} = \mathrm{softmax}'(g\, dp), \quad
    da = ((1 - g)\, dp)\, C^\top, \quad
    ds = \mathrm{softmax}'(da),

with :math:`\mathrm{softmax}'(d) = p \odot (d - \sum d \odot p)` along the softmax's axis,
and then the projections': :math:`dq = ds\,k / \sqrt D`, :math:`dk = ds^\top q / \sqrt D`.
Where :math:`p` underflows to below the dtype's smallest normal number, ``out`` is that
number's logarithm and gets no gradient.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.nn.linear import Linear
from minitransformer.nn.module import Module
from minitransformer.nn.softmax import SoftmaxCache, softmax_backward, softmax_forward


class CopyMixCache(NamedTuple):
    """What :func:`copy_mix_backward` needs."""

    p_vocab: object  # (B, T, V) the generator's probabilities
    a: object  # (B, T, S) the copy attention
    p_copy: object  # (B, T, V) a C
    g: object  # (B, T, 1) the gate
    g_copy: object  # (B, T, 1) 1 - g, without cancellation
    p: object  # (B, T, V) the mixture
    copy: object  # (B, S, V) C, the one-hot source ids


def source_one_hot(src, vocab_size: int, dtype):
    """C (B, S, V): row s of sequence b is the one-hot vector of the token ``src[b, s]``."""
    return (src[..., None] == xp.arange(vocab_size)).astype(dtype)  # (B, S, V)


def copy_mix_forward(logits, scores, gate_logit, *, copy, mask):
    """logits (B, T, V), the copy scores (B, T, S) and the gate's logit (B, T, 1); ``copy``
    (B, S, V) the one-hot source ids; ``mask`` (B, 1, S) boolean, False at source padding.
    Returns log p (B, T, V) and a :class:`CopyMixCache` (the module's math)."""
    p_vocab, _ = softmax_forward(logits)  # (B, T, V)
    a, _ = softmax_forward(xp.where(mask, scores, -xp.inf))  # (B, T, S): padding gets exactly 0
    p_copy = a @ copy  # (B, T, V): each token's share of the attention
    e = xp.exp(-xp.abs(gate_logit))  # (B, T, 1) in (0, 1]: no overflow
    g = xp.where(gate_logit >= 0, 1.0, e) / (1.0 + e)  # (B, T, 1) sigmoid(z)
    g_copy = xp.where(gate_logit >= 0, e, 1.0) / (1.0 + e)  # (B, T, 1) sigmoid(-z) = 1 - g
    p = g * p_vocab + g_copy * p_copy  # (B, T, V)
    tiny = xp.finfo(p.dtype).tiny
    out = xp.log(xp.maximum(p, tiny))  # (B, T, V)
    return out, CopyMixCache(p_vocab, a, p_copy, g, g_copy, p, copy)


def copy_mix_backward(dout, cache: CopyMixCache):
    """dout (B, T, V) -> dlogits (B, T, V), dscores (B, T, S), dgate_logit (B, T, 1)."""
    p_vocab, a, p_copy, g, g_copy, p, copy = cache
    tiny = xp.finfo(p.dtype).tiny
    dp = xp.where(p > tiny, dout / xp.maximum(p, tiny), 0.0)  # (B, T, V); none where out was clipped
    dg = (dp * (p_vocab - p_copy)).sum(axis=-1, keepdims=True)  # (B, T, 1)
    dgate = dg * g * g_copy  # (B, T, 1), sigmoid' = g (1 - g)
    dlogits = softmax_backward(g * dp, SoftmaxCache(p_vocab, -1))  # (B, T, V)
    da = (g_copy * dp) @ copy.swapaxes(-1, -2)  # (B, T, S)
    dscores = softmax_backward(da, SoftmaxCache(a, -1))  # (B, T, S); 0 at source padding
    return dlogits, dscores, dgate


class PointerHead(Module):
    """The decoder's states h (B, T, D), its logits (B, T, V), the encoder's memory (B, S, D)
    and the source ids -> log p (B, T, V), the generator and the copy mixed by a gate.

    One attention head of width D points at the source (its own query and key projections,
    no value: the copy distribution is the attention itself); the gate reads h."""

    def __init__(self, d_model: int, rng: backend.RNG):
        self.query = Linear(d_model, d_model, bias=False, rng=rng)
        self.key = Linear(d_model, d_model, bias=False, rng=rng)
        self.gate = Linear(d_model, 1, bias=True, rng=rng)
        self.scale = 1.0 / math.sqrt(d_model)

    def forward(self, h, logits, memory, copy, mask, keys=None):
        """h (B, T, D), logits (B, T, V), memory (B, S, D); ``copy`` (B, S, V) the one-hot source
        ids (:func:`source_one_hot`), ``mask`` (B, 1, S), False at source padding. ``keys``: the
        memory's keys (B, S, D), ``self.key(memory)``, when a decoder computed them once for every
        step (no backward then)."""
        q = self.query(h)  # (B, T, D)
        k = self.key(memory) if keys is None else keys  # (B, S, D)
        scores = (q @ k.swapaxes(-1, -2)) * self.scale  # (B, T, S)
        out, mix = copy_mix_forward(logits, scores, self.gate(h), copy=copy, mask=mask)  # (B, T, V)
        self.cache = (q, k, mix, keys is None)
        return out

    def backward(self, dout):
        """dout (B, T, V) -> dh (B, T, D), dlogits (B, T, V), dmemory (B, S, D); accumulates
        the projections' and the gate's gradients."""
        q, k, mix, projected = self._require_cache()
        if not projected:
            raise RuntimeError("PointerHead.backward: the last forward was given the memory's keys (decoding); "
                               "run forward without keys= to train")
        dlogits, dscores, dgate = copy_mix_backward(dout, mix)
        dq = (dscores @ k) * self.scale  # (B, T, D)
        dk = (dscores.swapaxes(-1, -2) @ q) * self.scale  # (B, S, D)
        dh = self.query.backward(dq) + self.gate.backward(dgate)  # (B, T, D)
        return dh, dlogits, self.key.backward(dk)

    def copy_attention(self):
        """The last forward's copy attention a (B, T, S): where each target step pointed."""
        return self._require_cache()[2].a

    @property
    def attention_probs(self):
        """The copy attention as one head's map, (B, 1, T, S), as an attention layer shows its
        probabilities (``viz``); None before a forward."""
        return None if self.cache is None else self.cache[2].a[:, None]  # (B, 1, T, S)
