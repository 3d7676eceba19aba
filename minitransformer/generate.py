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
(:class:`~minitransformer.nn.attention.KVCache`), and ``model.step`` computes
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
* The PAD token is never generated (its logit is treated as :math:`-\infty` when
  choosing; unless ``pad_id == eos_id``). PAD marks "no token" everywhere in the
  library (padding masks, ignored targets), so a generated PAD would be
  indistinguishable from padding, and the uncached path would even mask it out
  of attention. Scores remain the model's own log-probabilities
  :math:`\log \mathrm{softmax}(z_t)_{y_t}`, normalised over the full vocabulary.
* ``max_len`` bounds the total row length, prefix included. Defaults: the model's
  ``max_len`` for DecoderLM; for Seq2Seq the source width plus 50 (the rule of
  "Attention is all you need"), capped at the model's ``max_len``.
* Results come back as host NumPy arrays (token ids are what one prints, scores
  or stores). All work before that stays on the active backend's device.
* The model is put in eval mode (dropout off) while decoding; each module's
  previous mode is restored afterwards.
"""
from __future__ import annotations

import contextlib
import math
import numbers

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer import kernels
from minitransformer.nn.embedding import check_ids
from minitransformer.models.decoder_lm import DecoderLM
from minitransformer.models.seq2seq import Seq2Seq

__all__ = [
    "DecodeState", "init_decode_state", "decode_step_logits", "greedy", "sample", "beam_search",
    "gnmt_length_penalty", "filter_logits",
]


# ---------------------------------------------------------------------------
# The one place that knows about the cache
# ---------------------------------------------------------------------------
class DecodeState:
    """What :func:`decode_step_logits` needs between steps, for either path.

    Attributes:
        model: the DecoderLM or Seq2Seq being decoded.
        is_seq2seq: whether ``model`` takes a source.
        src: (N, S) device source ids (Seq2Seq only; None for DecoderLM). The
            uncached path re-encodes it every step; the cached path encoded it
            once in ``model.init_state``.
        cache: the model's incremental state (``model.init_state(...)``), or
            None for the uncached path.
        fed: how many prefix positions the cache already holds.
    """

    def __init__(self, model, src=None, use_cache: bool = True):
        self.model = model
        self.is_seq2seq = isinstance(model, Seq2Seq)
        self.src = src
        self.fed = 0
        if use_cache:
            self.cache = model.init_state(src) if self.is_seq2seq else model.init_state()
        else:
            self.cache = None

    @property
    def use_cache(self) -> bool:
        return self.cache is not None

    def reorder(self, index) -> None:
        """Keep rows ``index`` (N',) of the state, in that order (beam search: each
        new hypothesis inherits its parent's cache). ``index`` may repeat rows."""
        if self.cache is not None:
            self.model.reorder_state(self.cache, index)
        if self.src is not None:
            self.src = self.src[index]  # (N', S)


def init_decode_state(model, src=None, use_cache: bool = True) -> DecodeState:
    """Start decoding ``model``: an empty :class:`DecodeState` (for Seq2Seq, the
    source (N, S) is encoded here when ``use_cache``)."""
    return DecodeState(model, src, use_cache)


def decode_step_logits(state: DecodeState, ids):
    r"""Next-token logits for every row of the prefix ``ids``.

    Args:
        state: from :func:`init_decode_state`; updated in place.
        ids: (N, t) device int array, the full prefixes so far. Successive calls
            must extend the previous prefixes (after any ``state.reorder``).

    Returns:
        (N, V) logits :math:`z_t` of the token following position :math:`t - 1`.

    Cached: only the positions not yet fed, ``ids[:, fed:t]``, go through
    ``model.step`` (all of the prefix on the first call, then one token per
    call). Uncached: ``model.forward`` runs on the whole prefix and the last
    position's logits are kept; this is the slow reference the cache must match.
    """
    t = ids.shape[1]
    if state.cache is not None:
        if t <= state.fed:
            raise ValueError(f"decode_step_logits: prefix length {t} does not extend the "
                             f"{state.fed} positions already in the cache")
        logits = state.model.step(ids[:, state.fed:], state.cache)  # (N, V)
        state.fed = t
        return logits
    if state.is_seq2seq:
        return state.model.forward(state.src, ids)[:, -1]  # (N, V), from (N, t, V)
    return state.model.forward(ids)[:, -1]  # (N, V), from (N, t, V)


# ---------------------------------------------------------------------------
# Shared set-up
# ---------------------------------------------------------------------------
@contextlib.contextmanager
def _eval_mode(model):
    """Switch every module to eval mode; restore each module's own mode on exit."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for m, mode in modes:
            m.training = mode


def _device_ids(a, what: str):
    """Host or device integer ids -> device int64 array."""
    if backend.is_device_array(a):
        arr = a
    else:
        arr = backend.asarray(np.asarray(backend.to_numpy(a)))
    if arr.dtype.kind not in "iu":
        raise ValueError(f"{what}: token ids must be integers, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise ValueError(f"{what}: expected a 2-D array (B, T), got shape {tuple(arr.shape)}")
    return arr.astype(xp.int64)  # (B, T)


def _setup(model, batch_size, src, prompt, max_len):
    """Validate the common arguments.

    Returns ``(src, prefix, max_len)``: the device source (B, S) or None, the
    device prefix (B, P) every row starts from, and the total length limit.
    """
    if not isinstance(model, (DecoderLM, Seq2Seq)):
        raise TypeError(f"decoding needs a DecoderLM or Seq2Seq model, got {type(model).__name__}")
    cfg = model.config
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, numbers.Integral)):
        raise ValueError(f"batch_size must be an int, got {type(batch_size).__name__} "
                         "(pass the source as src=..., the prefix as prompt=...)")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    if isinstance(model, Seq2Seq):
        if src is None:
            raise ValueError("Seq2Seq decoding needs the source ids: src=(B, S)")
        src = _device_ids(src, "src")
        check_ids(src, cfg.src_vocab_size, "src")
        B = src.shape[0]
        if batch_size is not None and batch_size != B:
            raise ValueError(f"batch_size={batch_size} disagrees with src of batch {B}")
        vocab = cfg.tgt_vocab_size
        default_len = min(src.shape[1] + 50, cfg.max_len)
    else:
        if src is not None:
            raise ValueError("DecoderLM takes no source; pass batch_size=... or prompt=(B, P)")
        vocab = cfg.vocab_size
        default_len = cfg.max_len
        B = batch_size

    if prompt is None:
        if B is None:
            raise ValueError("pass batch_size=... or a prompt (B, P) to say how many sequences to make")
        prefix = xp.full((B, 1), cfg.bos_id, dtype=xp.int64)  # (B, 1): BOS
    else:
        prefix = _device_ids(prompt, "prompt")  # (B, P)
        if B is not None and prefix.shape[0] != B:
            raise ValueError(f"prompt has {prefix.shape[0]} rows but the batch has {B}")
        if prefix.shape[1] < 1:
            raise ValueError("prompt must hold at least one token (normally BOS)")
        check_ids(prefix, vocab, "prompt")
        if cfg.pad_id != cfg.eos_id and bool((prefix == cfg.pad_id).any()):
            raise ValueError("prompt must not contain pad_id: all prompts in a batch need the same "
                             "length (decode prompts of different lengths in separate calls)")

    if max_len is None:
        max_len = default_len
    if isinstance(max_len, bool) or not isinstance(max_len, numbers.Integral):
        raise ValueError(f"max_len must be an int, got {max_len!r}")
    max_len = int(max_len)
    if max_len > cfg.max_len:
        raise ValueError(f"max_len={max_len} exceeds the model's max_len={cfg.max_len}")
    if max_len < prefix.shape[1]:
        raise ValueError(f"max_len={max_len} is shorter than the prefix ({prefix.shape[1]} tokens)")
    return src, prefix, max_len


def _ban_pad(scores, cfg):
    """Make PAD unselectable: ``scores[:, pad] = -inf`` in a copy. scores: (N, V)."""
    if cfg.pad_id == cfg.eos_id:
        return scores
    scores = scores.copy()  # (N, V)
    scores[:, cfg.pad_id] = -xp.inf
    return scores


def _autoregress(model, src, prefix, max_len, use_cache, choose):
    """The loop of greedy decoding and sampling, one token per row per step.

    ``choose(logits (B, V)) -> (B,)`` picks each row's next token (PAD already
    banned). Rows that have produced EOS get PAD from then on; the loop stops as
    soon as every row is done or the length limit is reached.

    Returns the host array (B, T_out), T_out <= max_len.
    """
    cfg = model.config
    B, P = prefix.shape
    ids = xp.full((B, max_len), cfg.pad_id, dtype=xp.int64)  # (B, max_len), PAD beyond t
    ids[:, :P] = prefix
    done = xp.zeros((B,), dtype=bool)  # (B,), True once a row has emitted EOS
    t = P
    with _eval_mode(model):
        state = init_decode_state(model, src, use_cache)
        while t < max_len:
            logits = decode_step_logits(state, ids[:, :t])  # (B, V)
            tok = choose(_ban_pad(logits, cfg))  # (B,)
            tok = xp.where(done, cfg.pad_id, tok)  # (B,): finished rows only get PAD
            ids[:, t] = tok
            done |= tok == cfg.eos_id
            t += 1
            if bool(done.all()):  # one device->host sync per step
                break
    return backend.to_numpy(ids[:, :t])  # (B, T_out)


# ---------------------------------------------------------------------------
# Greedy decoding
# ---------------------------------------------------------------------------
def greedy(model, batch_size=None, src=None, max_len=None, prompt=None, use_cache: bool = True):
    r"""Greedy decoding: :math:`y_t = \arg\max_v z_{t,v}` at every step.

    Args:
        model: a :class:`~minitransformer.models.DecoderLM` or
            :class:`~minitransformer.models.Seq2Seq`.
        batch_size: number of sequences B (DecoderLM without a prompt; for
            Seq2Seq it is the number of rows of ``src``).
        src: (B, S) source ids, host or device (Seq2Seq only; right-padded with PAD).
        max_len: limit on the total row length, prefix included (see the module
            docstring for the defaults). At most the model's ``max_len``.
        prompt: (B, P) ids every row starts from, normally beginning with BOS.
            Default: a single BOS. It must not contain PAD (equal-length prompts).
        use_cache: KV-cached incremental decoding (True) or re-running the whole
            prefix each step (False); both give the same tokens.

    Returns:
        Host ``numpy`` int64 array (B, T_out): the prefix, the generated tokens,
        EOS, then PAD. ``T_out`` is the longest row's length (<= ``max_len``).
    """
    src, prefix, max_len = _setup(model, batch_size, src, prompt, max_len)
    return _autoregress(model, src, prefix, max_len, use_cache,
                        lambda logits: logits.argmax(axis=1))  # (B,)


# ---------------------------------------------------------------------------
# Sampling
# ---------------------------------------------------------------------------
def _check_sampling_args(temperature, top_k, top_p):
    if isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) \
            or not math.isfinite(temperature) or temperature <= 0:
        raise ValueError(f"temperature must be a finite number > 0, got {temperature!r} "
                         "(for the most likely token use greedy() or top_k=1)")
    if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral)
                              or top_k < 1):
        raise ValueError(f"top_k must be an int >= 1 (or None for no limit), got {top_k!r}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, numbers.Real)
                              or not 0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] (or None for no limit), got {top_p!r}")


def filter_logits(logits, temperature: float = 1.0, top_k: int | None = None,
                  top_p: float | None = None):
    r"""Temperature, top-k and nucleus (top-p) truncation, in that order.

    Args:
        logits: (N, V) scores :math:`z`; entries already :math:`-\infty` stay excluded.
        temperature: :math:`\tau > 0`; the distribution becomes
            :math:`\mathrm{softmax}(z/\tau)`: sharper for :math:`\tau < 1`, flatter for
            :math:`\tau > 1`.
        top_k: keep the ``k`` largest logits of each row (all logits tied with the
            k-th largest are kept too), set the rest to :math:`-\infty`.
        top_p: nucleus sampling. With the kept tokens sorted by probability,
            :math:`p_{(1)} \ge p_{(2)} \ge \dots`, keep the shortest head
            :math:`p_{(1)}, \dots, p_{(m)}` with :math:`\sum_{j \le m} p_{(j)} \ge p`, i.e.
            token :math:`(j)` is kept iff the mass strictly before it is
            :math:`< p`. The top token is always kept. Probabilities here are those
            after the temperature and top-k steps.

    Returns:
        (N, V) float64 filtered logits :math:`z/\tau` with :math:`-\infty` at
        the removed tokens.
    """
    _check_sampling_args(temperature, top_k, top_p)
    z = logits.astype(xp.float64) / float(temperature)  # (N, V)
    N, V = z.shape
    if top_k is not None and top_k < V:
        kth = xp.sort(z, axis=1)[:, V - top_k][:, None]  # (N, 1), the k-th largest logit
        z = xp.where(z < kth, -xp.inf, z)  # (N, V)
    if top_p is not None and top_p < 1.0:
        order = xp.argsort(-z, axis=1)  # (N, V), most probable first
        z_sorted = xp.take_along_axis(z, order, axis=1)  # (N, V)
        p_sorted = xp.exp(z_sorted - z_sorted[:, :1])  # (N, V), unnormalised, first entry 1
        p_sorted /= p_sorted.sum(axis=1, keepdims=True)
        mass_before = xp.cumsum(p_sorted, axis=1) - p_sorted  # (N, V), exclusive cumulative sum
        keep_sorted = mass_before < top_p  # (N, V), a prefix of each sorted row
        keep_sorted[:, 0] = True  # the top token survives any rounding
        inverse = xp.argsort(order, axis=1)  # (N, V), the permutation back to vocabulary order
        keep = xp.take_along_axis(keep_sorted, inverse, axis=1)  # (N, V)
        z = xp.where(keep, z, -xp.inf)  # (N, V)
    return z


def _inverse_cdf_draw(z, u):
    r"""One token per row of ``softmax(z)``, from uniforms ``u``.

    With :math:`F_i = \sum_{j \le i} p_j` the CDF, the token is the smallest
    :math:`i` with :math:`F_i > u\,F_{V-1}`, computed as
    :math:`\#\{i : F_i \le u F_{V-1}\}` (tokens of probability 0 are never hit).
    z: (N, V) float64 with at least one finite entry per row; u: (N,) in [0, 1).
    """
    V = z.shape[1]
    p = xp.exp(z - z.max(axis=1, keepdims=True))  # (N, V), unnormalised probabilities
    cdf = xp.cumsum(p, axis=1)  # (N, V)
    target = u[:, None] * cdf[:, -1:]  # (N, 1)
    tok = (cdf <= target).sum(axis=1)  # (N,)
    last = (V - 1) - (p[:, ::-1] > 0).argmax(axis=1)  # (N,), last token of positive probability
    return xp.minimum(tok, last).astype(xp.int64)  # (N,): guards u * F rounding up to F


def _as_rng(rng) -> backend.RNG:
    if rng is None:
        return backend.RNG(int(np.random.SeedSequence().entropy % (2 ** 63)))
    if isinstance(rng, backend.RNG):
        return rng
    if isinstance(rng, numbers.Integral) and not isinstance(rng, bool):
        return backend.RNG(int(rng))
    raise ValueError(f"rng must be None, an int seed or a backend.RNG, got {type(rng).__name__}")


def sample(model, batch_size=None, src=None, max_len=None, prompt=None, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, rng=None, use_cache: bool = True):
    r"""Ancestral sampling: :math:`y_t \sim \mathrm{softmax}(\tilde z_t)` at every step.

    :math:`\tilde z_t` are the logits after :func:`filter_logits` (temperature
    :math:`\tau`, then top-k, then top-p). Each step draws one uniform per row
    from ``rng`` on the device, :math:`u \in [0,1)^B`, and inverts the CDF of
    each row (vectorised over the batch, no host round trip). The draws do not
    depend on the path, so ``use_cache=True`` and ``False`` give the same tokens
    for the same seed. Rows that are already done still consume their uniform:
    at step ``t`` row ``b`` always uses entry ``b`` of the t-th draw, whichever
    path computed the logits and whenever the other rows finish.

    Special cases: ``top_k=1`` (or a tiny ``top_p``) is greedy decoding;
    :math:`\tau \to 0` approaches it.

    Args:
        model, batch_size, src, max_len, prompt, use_cache: as in :func:`greedy`.
        temperature: :math:`\tau > 0`.
        top_k: int >= 1, or None for no top-k truncation.
        top_p: in (0, 1], or None (= 1) for no nucleus truncation.
        rng: a :class:`~minitransformer.backend.RNG` (advanced in place), an int
            seed, or None for a fresh random seed.

    Returns:
        Host ``numpy`` int64 array (B, T_out), laid out as in :func:`greedy`.

    Raises:
        ValueError: for a temperature <= 0, top_k < 1, top_p outside (0, 1].
    """
    _check_sampling_args(temperature, top_k, top_p)
    rng = _as_rng(rng)
    src, prefix, max_len = _setup(model, batch_size, src, prompt, max_len)
    B = prefix.shape[0]

    def choose(logits):
        z = filter_logits(logits, temperature, top_k, top_p)  # (B, V)
        u = rng.random((B,), dtype=xp.float64)  # (B,) uniforms in [0, 1)
        return _inverse_cdf_draw(z, u)  # (B,)

    return _autoregress(model, src, prefix, max_len, use_cache, choose)


# ---------------------------------------------------------------------------
# Beam search
# ---------------------------------------------------------------------------
def gnmt_length_penalty(length, alpha: float):
    r"""GNMT length penalty :math:`\mathrm{lp}(L) = \big((5 + L)/6\big)^\alpha`.

    A finished hypothesis is ranked by :math:`\log p(y)/\mathrm{lp}(|y|)`. Log-
    probabilities only decrease as tokens are added, so raw scores favour short
    outputs; :math:`\alpha > 0` compensates (:math:`\alpha = 0`: no normalisation,
    :math:`\alpha = 1`: roughly per-token averaging). ``length`` may be a number
    or an array.
    """
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src=None, batch_size=None, prompt=None, beam_size: int = 5,
                length_penalty: float = 0.6, max_len=None, n_best: int = 1, use_cache: bool = True):
    r"""Batched beam search with the GNMT length penalty.

    Each batch item keeps ``K = beam_size`` live hypotheses; the B items' beams
    are the N = B*K rows of one batch (row ``b*K + k`` is beam ``k`` of item
    ``b``), so one model call per step serves all of them.

    One step, for item :math:`b` with live raw scores :math:`s_k = \log p(y^{(k)})`:

    1. Expand: every live hypothesis :math:`k` and token :math:`v` gives a
       candidate of score :math:`s_k + \log\mathrm{softmax}(z^{(k)})_v`: a
       (K, V) table, flattened to K*V per item (PAD excluded).
    2. Select the K best candidates (the first step expands only beam 0, so the
       beams start distinct). Candidate ``j = k*V + v`` has parent ``k = j // V``
       and token ``v = j % V``. The decoding state follows the parents through
       ``reorder_state``.
    3. Candidates ending in EOS leave the beam and join the item's finished set,
       ranked by :math:`\hat s = s/\mathrm{lp}(L)` where :math:`L` counts the
       generated tokens including EOS (not the prefix); the set keeps the K
       best. The other selected candidates are the new live beam (for that step
       it may hold fewer than K; the next expansion refills it).
    4. An item is done when it has no live hypothesis, or when it holds K
       finished ones and the worst of them beats the best any live hypothesis
       could still reach. Since further tokens only lower :math:`s \le 0`, that
       bound is exact: :math:`s_{\text{best}}/\mathrm{lp}(L_{\max})` for
       :math:`\alpha \ge 0` (the penalty grows with length) and
       :math:`s_{\text{best}}/\mathrm{lp}(L+1)` for :math:`\alpha < 0`. Done items'
       beams are frozen (score :math:`-\infty`). The loop stops when all items
       are done or the rows reach ``max_len``; then any still-live hypotheses
       compete, unfinished, with the finished ones (scored at their length).

    With ``beam_size=1`` this is exactly :func:`greedy`: the single candidate
    is the argmax; if it is EOS the beam empties and the item is done.

    Args:
        model, src, batch_size, prompt, max_len, use_cache: as in :func:`greedy`.
        beam_size: K >= 1 hypotheses per item.
        length_penalty: :math:`\alpha` of :func:`gnmt_length_penalty` (GNMT used 0.6 to 0.7).
        n_best: how many hypotheses to return per item, 1 <= n_best <= K.

    Returns:
        ``(ids, scores)``: host ``numpy`` arrays ``ids`` int64 (B, n_best, T_out),
        laid out as in :func:`greedy`, and ``scores`` float64 (B, n_best), the
        length-normalised log-probabilities :math:`\log p(y)/\mathrm{lp}(L)`, best
        first. Entries of an item with fewer than n_best hypotheses are all-PAD
        rows with score :math:`-\infty`.
    """
    alpha, lp = length_penalty, gnmt_length_penalty
    if isinstance(beam_size, bool) or not isinstance(beam_size, numbers.Integral) or beam_size < 1:
        raise ValueError(f"beam_size must be an int >= 1, got {beam_size!r}")
    if isinstance(n_best, bool) or not isinstance(n_best, numbers.Integral) \
            or not 1 <= n_best <= beam_size:
        raise ValueError(f"n_best must be an int in [1, beam_size={beam_size}], got {n_best!r}")
    if isinstance(alpha, bool) or not isinstance(alpha, numbers.Real) or not math.isfinite(alpha):
        raise ValueError(f"length_penalty must be a finite number, got {alpha!r}")
    alpha = float(alpha)
    src, prefix, max_len = _setup(model, batch_size, src, prompt, max_len)
    cfg = model.config
    B, P = prefix.shape
    K = int(beam_size)
    N = B * K
    L = max_len
    items = xp.arange(B)  # (B,)
    ninf = -xp.inf

    ids = xp.full((N, L), cfg.pad_id, dtype=xp.int64)  # (N, L), row b*K + k = beam k of item b
    ids[:, :P] = xp.repeat(prefix, K, axis=0)
    live = xp.full((B, K), ninf, dtype=xp.float64)  # (B, K) raw log-probs; -inf = no hypothesis
    live[:, 0] = 0.0
    fin_ids = xp.full((B, K, L), cfg.pad_id, dtype=xp.int64)  # (B, K, L) finished hypotheses
    fin_score = xp.full((B, K), ninf, dtype=xp.float64)  # (B, K) their normalised scores, sorted
    done = xp.zeros((B,), dtype=bool)  # (B,)
    t = P
    with _eval_mode(model):
        state = init_decode_state(model, src, use_cache)
        state.reorder(xp.repeat(items, K))  # B rows -> N rows (Seq2Seq: reuse the one encoding)
        while t < L:
            logits = decode_step_logits(state, ids[:, :t])  # (N, V)
            V = logits.shape[1]
            logp = _ban_pad(kernels.log_softmax(logits.astype(xp.float64)), cfg)  # (N, V)
            cand = (live.reshape(N, 1) + logp).reshape(B, K * V)  # (B, K*V)
            top = xp.argsort(-cand, axis=1, kind="stable")[:, :K]  # (B, K), best first
            top_score = xp.take_along_axis(cand, top, axis=1)  # (B, K)
            parent, token = top // V, top % V  # (B, K) each
            rows = (items[:, None] * K + parent).reshape(N)  # (N,) parent row of each new row
            alive = xp.isfinite(top_score)  # (B, K)
            is_eos = alive & (token == cfg.eos_id)  # (B, K)
            ids = ids[rows]  # (N, L), prefixes follow their parents
            ids[:, t] = xp.where(alive, token, cfg.pad_id).reshape(N)
            state.reorder(rows)
            gen_len = t + 1 - P  # generated tokens so far, EOS included

            # finished set: keep the K best of (old finished, new EOS candidates)
            pool_score = xp.concatenate(
                [fin_score, xp.where(is_eos, top_score / lp(gen_len, alpha), ninf)], axis=1)  # (B, 2K)
            pool_ids = xp.concatenate([fin_ids, ids.reshape(B, K, L)], axis=1)  # (B, 2K, L)
            keep = xp.argsort(-pool_score, axis=1, kind="stable")[:, :K]  # (B, K)
            fin_score = xp.take_along_axis(pool_score, keep, axis=1)  # (B, K)
            fin_ids = xp.take_along_axis(pool_ids, keep[:, :, None], axis=1)  # (B, K, L)

            live = xp.where(is_eos, ninf, top_score)  # (B, K)
            t += 1
            best_live = live.max(axis=1)  # (B,)
            bound_len = (L - P) if alpha >= 0 else gen_len + 1
            bound = best_live / lp(bound_len, alpha)  # (B,) best normalised score still reachable
            done = done | ~xp.isfinite(best_live) | (fin_score[:, K - 1] >= bound)  # (B,)
            live = xp.where(done[:, None], ninf, live)  # (B, K): done items are frozen
            if bool(done.all()):
                break

    # Items cut off by max_len: their live hypotheses compete unfinished.
    open_score = xp.where(xp.isfinite(live), live / lp(t - P, alpha), ninf)  # (B, K)
    pool_score = xp.concatenate([fin_score, open_score], axis=1)  # (B, 2K)
    pool_ids = xp.concatenate([fin_ids, ids.reshape(B, K, L)], axis=1)  # (B, 2K, L)
    best = xp.argsort(-pool_score, axis=1, kind="stable")[:, :n_best]  # (B, n_best)
    scores = xp.take_along_axis(pool_score, best, axis=1)  # (B, n_best)
    out = xp.take_along_axis(pool_ids, best[:, :, None], axis=1)  # (B, n_best, L)
    out = xp.where(xp.isfinite(scores)[:, :, None], out, cfg.pad_id)  # (B, n_best, L)
    if cfg.pad_id != cfg.eos_id:
        t_out = int((out != cfg.pad_id).sum(axis=2).max())  # longest returned row
    else:
        t_out = t
    return backend.to_numpy(out[:, :, :t_out]), backend.to_numpy(scores)
