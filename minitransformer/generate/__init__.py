r"""Decoding: turning a trained model into token sequences.

An autoregressive model factorises the probability of an output sequence
:math:`y = (y_1, \dots, y_L)` given a prefix :math:`y_0` (BOS, or a prompt) and,
for :class:`~minitransformer.models.Seq2Seq`, a source :math:`x`:

.. math:: p(y \mid x) = \prod_{t=1}^{L} p(y_t \mid y_{<t}, x),\qquad
          p(\cdot \mid y_{<t}, x) = \mathrm{softmax}(z_t),

where :math:`z_t \in \mathbb{R}^V` are the logits the model produces at the last
position of the prefix :math:`y_{<t}`. Every strategy here repeats one step:
*get* :math:`z_t`, *choose* the next token(s), *append*, until each sequence has
produced EOS or the length limit is reached.

The loop and greedy decoding are :mod:`~minitransformer.generate.decode`, ancestral
sampling :mod:`~minitransformer.generate.sampling`, beam search
:mod:`~minitransformer.generate.beam`, and the rules that ban tokens
:mod:`~minitransformer.generate.constraint`.

Strategies
==========

:func:`greedy`
    :math:`y_t = \arg\max_v z_{t,v}`. Deterministic, cheap, often repetitive.
:func:`sample`
    Ancestral sampling :math:`y_t \sim \mathrm{softmax}(\tilde z_t / \tau)` after
    optional top-k and nucleus (top-p) truncation of the distribution.
:func:`beam_search`
    Keeps the ``beam_size`` best partial hypotheses by total log-probability and
    ranks finished ones with the GNMT length penalty.

Getting the logits: the KV cache
================================

Without a cache, step :math:`t` re-runs the whole prefix of length :math:`t`
through ``model.forward`` and keeps the last position: the cost of step
:math:`t` grows with :math:`t` (attention is :math:`O(t^2)` per step, so
:math:`O(T^3)` for a sequence). With a cache (``use_cache=True``, the default)
each layer keeps the keys and values of the tokens already seen
(:class:`~minitransformer.nn.kv_cache.KVCache`), and ``model.step`` computes
only the new token: :math:`O(t)` attention work per step. A Seq2Seq model also
encodes its source once instead of once per step. Both paths compute the same
function; in float64 their logits agree to rounding error, which the tests
check. The switch between them lives in exactly one place,
:func:`decode_step_logits`.

Conventions
===========

* Sequences are rows of an int array (B, T) beginning with the prefix (BOS, or
  the prompt). A row ends with EOS; every position after its EOS holds PAD.
  A row that reaches the length limit without EOS simply stops (no EOS).
* PAD and BOS are never generated (their logits are treated as :math:`-\infty`
  when choosing; unless one equals ``eos_id``). PAD marks "no token" everywhere in the
  library (padding masks, ignored targets), so a generated PAD would be
  indistinguishable from padding, and the uncached path would even mask it out
  of attention. Scores remain the model's own log-probabilities
  :math:`\log \mathrm{softmax}(z_t)_{y_t}`, normalised over the full vocabulary.
* ``max_len`` bounds the total row length, prefix included. Defaults: the model's
  ``max_len`` for DecoderLM; for Seq2Seq the source width plus 50 (the rule of
  "Attention is all you need"), capped at the model's ``max_len``.
* Results come back as host NumPy arrays (token ids are what one prints, scores
  or stores). All work before that stays on the active backend's device.
* ``greedy`` and ``sample`` take an optional ``constraint``: a rule that bans
  some next tokens at every step (:mod:`.constraint`), such as the SMILES
  grammar of :class:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar`. Off
  by default; with ``constraint=None`` nothing changes.
* The model is put in eval mode (dropout off) while decoding; each module's
  previous mode is restored afterwards.
"""
from minitransformer.generate.beam import beam_search, gnmt_length_penalty
from minitransformer.generate.constraint import Constraint
from minitransformer.generate.decode import DecodeState, decode_step_logits, greedy, init_decode_state
from minitransformer.generate.sampling import filter_logits, sample

__all__ = [
    "DecodeState", "init_decode_state", "decode_step_logits", "greedy", "sample", "beam_search",
    "gnmt_length_penalty", "filter_logits", "Constraint",
]
