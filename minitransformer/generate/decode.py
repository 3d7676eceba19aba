"""Decoding one token at a time: the decoding state (with or without the KV
cache), the loop every strategy runs, and greedy decoding. :mod:`minitransformer.generate`
explains the strategies and conventions; sampling is in :mod:`.sampling`, beam search
in :mod:`.beam`."""
from __future__ import annotations

import contextlib
import numbers

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.generate.constraint import advance_constraint, apply_constraint, start_constraint
from minitransformer.models.decoder_lm import DecoderLM
from minitransformer.models.lstm_lm import LSTMLM
from minitransformer.models.rnn_seq2seq import RNNSeq2Seq
from minitransformer.models.seq2seq import Seq2Seq

GENERATORS = (DecoderLM, LSTMLM)  # the language models: no source
TRANSLATORS = (Seq2Seq, RNNSeq2Seq)  # the encoder-decoders: a source each
from minitransformer.nn.embedding import check_ids


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
        cache: the model's incremental state (``model.init_state(...)``: the KV
            caches of a transformer, the (h, c) of every layer of an LSTMLM), or
            None for the uncached path.
        fed: how many prefix positions the cache already holds.
    """

    def __init__(self, model, src=None, use_cache: bool = True):
        self.model = model
        self.is_seq2seq = isinstance(model, TRANSLATORS)
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


def check_finite_rows(logits, t: int) -> None:
    """ValueError when a row of next-token ``logits`` (N, V) holds no finite value: a model whose
    weights overflow (a damaged checkpoint, a diverged run) would otherwise have PAD drawn and
    written mid-sequence. One device->host sync, beside the decoding loop's own."""
    if not bool(xp.isfinite(logits).any(axis=1).all()):
        raise ValueError(f"the model's next-token scores at position {t} are NaN or infinite for every token: its "
                         "weights overflow; the checkpoint is damaged or its training diverged")


# ---------------------------------------------------------------------------
# Shared set-up
# ---------------------------------------------------------------------------
@contextlib.contextmanager
def eval_mode(model):
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


def setup_decoding(model, batch_size, src, prompt, max_len):
    """Validate the common arguments.

    Returns ``(src, prefix, max_len)``: the device source (B, S) or None, the
    device prefix (B, P) every row starts from, and the total length limit.
    """
    if not isinstance(model, GENERATORS + TRANSLATORS):
        raise TypeError(f"decoding needs a language model or an encoder-decoder (DecoderLM, LSTMLM, Seq2Seq, "
                        f"RNNSeq2Seq), got {type(model).__name__}")
    cfg = model.config
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, numbers.Integral)):
        raise ValueError(f"batch_size must be an int, got {type(batch_size).__name__} "
                         "(pass the source as src=..., the prefix as prompt=...)")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")

    if isinstance(model, TRANSLATORS):
        if src is None:
            raise ValueError(f"{type(model).__name__} decoding needs the source ids: src=(B, S)")
        src = _device_ids(src, "src")
        check_ids(src, cfg.src_vocab_size, "src")
        B = src.shape[0]
        if batch_size is not None and batch_size != B:
            raise ValueError(f"batch_size={batch_size} disagrees with src of batch {B}")
        vocab = cfg.tgt_vocab_size
        default_len = min(src.shape[1] + 50, cfg.max_len)
    else:
        if src is not None:
            raise ValueError(f"{type(model).__name__} takes no source; pass batch_size=... or prompt=(B, P)")
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


def ban_specials(scores, cfg):
    """Make PAD and BOS unselectable: ``scores[:, [pad, bos]] = -inf`` in a copy.

    PAD means "no token" and BOS "start of sequence"; neither may appear inside
    a generated sequence (the one that equals EOS, if any, stays allowed).
    scores: (N, V); returns (N, V)."""
    banned = [i for i in (cfg.pad_id, getattr(cfg, "bos_id", None)) if i is not None and i != cfg.eos_id]
    scores = scores.copy()  # (N, V)
    scores[:, banned] = -xp.inf
    return scores


def autoregress(model, src, prefix, max_len, use_cache, choose, constraint=None):
    """The loop of greedy decoding and sampling, one token per row per step.

    ``choose(logits (B, V)) -> (B,)`` picks each row's next token (PAD and BOS
    already banned, and the tokens ``constraint`` bans, if one is given: see
    :mod:`.constraint`). Rows that have produced EOS get PAD from then on; the
    loop stops as soon as every row is done or the length limit is reached.

    Returns the host array (B, T_out), T_out <= max_len.
    """
    cfg = model.config
    B, P = prefix.shape
    ids = xp.full((B, max_len), cfg.pad_id, dtype=xp.int64)  # (B, max_len), PAD beyond t
    ids[:, :P] = prefix
    done = xp.zeros((B,), dtype=bool)  # (B,), True once a row has emitted EOS
    t = P
    with eval_mode(model):
        state = init_decode_state(model, src, use_cache)
        if constraint is not None:
            start_constraint(constraint, prefix, max_len)
        while t < max_len:
            logits = decode_step_logits(state, ids[:, :t])  # (B, V)
            check_finite_rows(logits, t)
            scores = ban_specials(logits, cfg)  # (B, V)
            if constraint is not None:
                scores = apply_constraint(scores, constraint, cfg)  # (B, V)
            tok = choose(scores)  # (B,)
            tok = xp.where(done, cfg.pad_id, tok)  # (B,): finished rows only get PAD
            if constraint is not None:
                advance_constraint(constraint, tok)  # one device->host copy of (B,)
            ids[:, t] = tok
            done |= tok == cfg.eos_id
            t += 1
            if bool(done.all()):  # one device->host sync per step
                break
    return backend.to_numpy(ids[:, :t])  # (B, T_out)


# ---------------------------------------------------------------------------
# Greedy decoding
# ---------------------------------------------------------------------------
def greedy(model, batch_size=None, src=None, max_len=None, prompt=None, use_cache: bool = True,
           constraint=None):
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
        constraint: None, or an object that bans next tokens at each step
            (``start``, ``banned``, ``advance``; see :mod:`.constraint`), e.g.
            :class:`~minitransformer.chem.grammar.smiles_grammar.SmilesGrammar`.

    Returns:
        Host ``numpy`` int64 array (B, T_out): the prefix, the generated tokens,
        EOS, then PAD. ``T_out`` is the longest row's length (<= ``max_len``).
    """
    src, prefix, max_len = setup_decoding(model, batch_size, src, prompt, max_len)
    return autoregress(model, src, prefix, max_len, use_cache,
                        lambda logits: logits.argmax(axis=1), constraint)  # (B,)
