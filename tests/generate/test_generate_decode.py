"""Tests for minitransformer.generate: greedy decoding, sampling, beam search.

Small float64 models with random weights. The central checks:

* the KV-cached step and the re-run-everything forward give the same logits at
  every step (to 1e-9), hence the same tokens for every strategy and seed;
* beam search with beam 1 is greedy, its scores are the model's own
  log-probabilities divided by the GNMT penalty, and with a beam wide enough to
  hold every prefix it finds the exhaustive optimum;
* EOS/PAD layout, stopping and length limits, argument validation.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.backend import xp
from minitransformer.functional import log_softmax
from minitransformer.generate import (
    beam_search, decode_step_logits, filter_logits, gnmt_length_penalty, greedy,
    init_decode_state, sample,
)
from minitransformer.models import DecoderLM, DecoderLMConfig, Seq2Seq, Seq2SeqConfig

V = 13
PAD, BOS, EOS = 0, 1, 2


def make_lm(norm="pre", max_len=24, **kw):
    with backend.dtype_scope("float64"):
        cfg = DecoderLMConfig(vocab_size=V, max_len=max_len, d_model=16, n_heads=2, n_layers=2,
                              d_ff=32, norm=norm, seed=7, **kw)
        return DecoderLM(cfg)


def make_s2s(norm="pre", max_len=24, **kw):
    with backend.dtype_scope("float64"):
        cfg = Seq2SeqConfig(src_vocab_size=11, tgt_vocab_size=V, max_len=max_len, d_model=16,
                            n_heads=2, n_enc_layers=2, n_dec_layers=2, d_ff=32, norm=norm, seed=11,
                            **kw)
        return Seq2Seq(cfg)


def add_eos_bias(model, amount):
    """Shift the output bias of EOS: > 0 makes EOS likely, < 0 practically impossible."""
    bias = model.head.linear.bias.data
    bias[EOS] = bias[EOS] + amount


SRC = np.array([[3, 4, 5, 6, 7], [8, 3, 9, 0, 0], [10, 4, 4, 6, 0]])  # (3, 5), right-padded


def device_src():
    return backend.asarray(SRC)


def random_ids(B, T, seed=0):
    """(B, T) ids with BOS first and no PAD (PAD would be masked by forward only)."""
    g = np.random.default_rng(seed)
    ids = g.integers(1, V, size=(B, T))
    ids[:, 0] = BOS
    return backend.asarray(ids)


def assert_layout(ids, prefix_len=1):
    """Rows: prefix, tokens without PAD, at most one EOS, then only PAD."""
    assert isinstance(ids, np.ndarray) and ids.dtype.kind == "i"
    for row in ids:
        gen = row[prefix_len:]
        eos = np.flatnonzero(gen == EOS)
        end = eos[0] + 1 if len(eos) else len(gen)
        assert (gen[:end] != PAD).all(), row
        assert (gen[end:] == PAD).all(), row


# ---------------------------------------------------------------------------
# cached and uncached logits
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_step_logits_match_forward_lm(norm):
    model = make_lm(norm).eval()
    ids = random_ids(3, 24)
    full = backend.to_numpy(model.forward(ids))  # (3, 24, V)
    _assert_steps_give_the_forward(init_decode_state(model), init_decode_state(model, use_cache=False), ids, full,
                                   first=3)  # the first call feeds a 3-token prefix at once


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_step_logits_match_forward_seq2seq(norm):
    model = make_s2s(norm).eval()
    src = device_src()
    ids = random_ids(3, 20, seed=1)
    full = backend.to_numpy(model.forward(src, ids))  # (3, 20, V)
    _assert_steps_give_the_forward(init_decode_state(model, src), init_decode_state(model, src, use_cache=False),
                                   ids, full, first=1)


def test_step_logits_match_forward_with_an_all_pad_source():
    """A source of PADs only: every cross-attention row of that sequence is fully masked. Its
    steps, cached and not, are finite and equal the full forward, as the other sequence's are."""
    model = make_s2s().eval()
    src = backend.asarray(np.array([[3, 4, 5, 0], [PAD, PAD, PAD, PAD]]))  # (2, 4)
    ids = random_ids(2, 12, seed=2)
    with np.errstate(all="raise"):
        full = backend.to_numpy(model.forward(src, ids))  # (2, 12, V)
        assert np.isfinite(full).all()
        _assert_steps_give_the_forward(init_decode_state(model, src), init_decode_state(model, src, use_cache=False),
                                       ids, full, first=1)
    np.testing.assert_array_equal(greedy(model, src=src), greedy(model, src=src, use_cache=False))


def _assert_steps_give_the_forward(cached, uncached, ids, full, first: int):
    """Each decoding step's logits, with and without the KV cache, equal the full forward's at
    the prefix's last position. ids: (B, T); full: (B, T, V)."""
    for t in range(first, ids.shape[1] + 1):
        a = backend.to_numpy(decode_step_logits(cached, ids[:, :t]))  # (B, V)
        b = backend.to_numpy(decode_step_logits(uncached, ids[:, :t]))  # (B, V)
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9, err_msg=f"cached against uncached, prefix {t}")
        np.testing.assert_allclose(a, full[:, t - 1], rtol=0, atol=1e-9, err_msg=f"step against forward, prefix {t}")


@pytest.mark.parametrize("kind", ["lm", "s2s"])
def test_reordered_state_matches_forward(kind):
    """After reorder (as beam search does: rows duplicated and permuted) the cache
    still gives the forward pass's logits of the reordered prefixes."""
    model = (make_lm() if kind == "lm" else make_s2s("post")).eval()
    src = device_src() if kind == "s2s" else None
    ids = random_ids(3, 12, seed=2)
    cached = init_decode_state(model, src)
    uncached = init_decode_state(model, src, use_cache=False)
    for t in range(1, 6):
        decode_step_logits(cached, ids[:, :t])
    index = xp.asarray([2, 0, 0, 1, 2, 2])  # (6,)
    cached.reorder(index)
    uncached.reorder(index)
    ids = ids[index]
    for t in range(6, 13):
        a = backend.to_numpy(decode_step_logits(cached, ids[:, :t]))
        b = backend.to_numpy(decode_step_logits(uncached, ids[:, :t]))
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9)


# ---------------------------------------------------------------------------
# greedy and sampling: cache on/off, both backends
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_greedy_cache_equal(any_backend, norm):
    lm, s2s = make_lm(norm), make_s2s(norm)
    add_eos_bias(lm, 2.5)
    add_eos_bias(s2s, 2.5)
    prompt = backend.to_numpy(random_ids(4, 3, seed=3))
    a = greedy(lm, prompt=prompt)
    np.testing.assert_array_equal(a, greedy(lm, prompt=prompt, use_cache=False))
    assert_layout(a, prefix_len=3)
    np.testing.assert_array_equal(a[:, :3], prompt)
    b = greedy(s2s, src=device_src())
    np.testing.assert_array_equal(b, greedy(s2s, src=SRC, use_cache=False))
    assert_layout(b)
    assert (b[:, 0] == BOS).all()


SAMPLING = [dict(), dict(temperature=0.7), dict(temperature=1.5, top_k=4), dict(top_p=0.8),
            dict(temperature=0.9, top_k=6, top_p=0.9)]


@pytest.mark.parametrize("kw", SAMPLING, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "plain")
def test_sample_cache_equal(any_backend, kw):
    lm, s2s = make_lm("post"), make_s2s()
    add_eos_bias(lm, 1.5)
    add_eos_bias(s2s, 1.5)
    a = sample(lm, 6, rng=5, **kw)
    np.testing.assert_array_equal(a, sample(lm, 6, rng=5, use_cache=False, **kw))
    assert_layout(a)
    b = sample(s2s, src=SRC, rng=backend.RNG(9), **kw)
    np.testing.assert_array_equal(b, sample(s2s, src=SRC, rng=backend.RNG(9), use_cache=False, **kw))
    assert_layout(b)


def test_sample_seeds(any_backend):
    lm = make_lm()
    a, b, c = sample(lm, 8, rng=1), sample(lm, 8, rng=1), sample(lm, 8, rng=2)
    np.testing.assert_array_equal(a, b)
    assert a.shape != c.shape or (a != c).any()
    assert len({tuple(r) for r in a}) > 1  # rows draw independently
    rng = backend.RNG(4)
    sample(lm, 2, rng=rng, max_len=6)
    assert rng.counter == 5  # one (B,) draw per generated position, advanced in place


def test_topk1_and_tiny_top_p_are_greedy(any_backend):
    lm, s2s = make_lm(), make_s2s("post")
    add_eos_bias(lm, 2.0)
    g = greedy(lm, 5)
    np.testing.assert_array_equal(sample(lm, 5, top_k=1, rng=0), g)
    np.testing.assert_array_equal(sample(lm, 5, top_p=1e-6, rng=1, temperature=3.0), g)
    gs = greedy(s2s, src=SRC)
    np.testing.assert_array_equal(sample(s2s, src=SRC, top_k=1, rng=2, use_cache=False), gs)
    np.testing.assert_array_equal(sample(s2s, src=SRC, top_p=1e-9, rng=3), gs)


def test_filter_logits():
    z = xp.asarray([[2.0, 1.0, 0.0, -1.0, -xp.inf], [0.0, 0.0, 3.0, 1.0, 2.0]])
    f = backend.to_numpy(filter_logits(z, top_k=2))
    np.testing.assert_array_equal(np.isfinite(f), [[1, 1, 0, 0, 0], [0, 0, 1, 0, 1]])
    # row 0: probabilities .644 .237 .087 .032 0, cumulative .644 .881 .968 1
    for p, kept in [(0.85, [1, 1, 0, 0, 0]), (0.9, [1, 1, 1, 0, 0]), (0.99, [1, 1, 1, 1, 0])]:
        f = backend.to_numpy(filter_logits(z, top_p=p))
        np.testing.assert_array_equal(np.isfinite(f[0]), kept)
    f = backend.to_numpy(filter_logits(z, top_p=0.6))
    np.testing.assert_array_equal(np.isfinite(f[0]), [1, 0, 0, 0, 0])
    f = backend.to_numpy(filter_logits(z, temperature=2.0))
    np.testing.assert_allclose(f[1], [-1.5, -1.5, 0.0, -1.0, -0.5])  # (z - max z) / 2


def test_a_tiny_temperature_is_greedy_and_never_emits_pad():
    """(z - max z) / tau: the top token at 0, every other at -inf, never an overflow to NaN."""
    z = xp.asarray([[2.0, 1.0, 0.0, -xp.inf], [1e30, -1e30, 5.0, 0.0]])
    f = backend.to_numpy(filter_logits(z, temperature=1e-320))
    assert not np.isnan(f).any() and f[0, 0] == 0.0 and f[1, 0] == 0.0
    assert np.isneginf(f[0, 1:]).all() and np.isneginf(f[1, 1:]).all()
    from minitransformer.generate.sampling import _inverse_cdf_draw
    tok = backend.to_numpy(_inverse_cdf_draw(xp.asarray(f), xp.asarray([0.0, 0.999])))
    assert tok.tolist() == [0, 0], "the top token, not PAD by a NaN"
    lm = make_lm()
    np.testing.assert_array_equal(sample(lm, batch_size=3, temperature=1e-300, rng=1), greedy(lm, batch_size=3))


def test_nan_and_infinite_logits_never_make_the_draw_pad():
    """A NaN logit is never drawn; +inf logits share the row among themselves (softmax's limit),
    where z - max z gave NaN and the draw PAD (token 0)."""
    from minitransformer.generate.sampling import _inverse_cdf_draw
    z = xp.asarray([[0.0, np.nan, 1.0, 2.0],
                    [0.0, np.inf, 1.0, 2.0],
                    [np.nan, 1.0, np.inf, np.inf]])  # (3, 4)
    f = backend.to_numpy(filter_logits(z, temperature=0.7, top_p=0.9))
    assert not np.isnan(f).any()
    for u in (0.0, 0.3, 0.6, 0.999):
        tok = backend.to_numpy(_inverse_cdf_draw(xp.asarray(f), xp.asarray([u, u, u])))
        assert tok[0] in (2, 3) and tok[1] == 1 and tok[2] in (2, 3), (u, tok)
    tok = backend.to_numpy(_inverse_cdf_draw(xp.asarray(f), xp.asarray([0.25, 0.25, 0.25])))
    assert tok[2] == 2 and backend.to_numpy(_inverse_cdf_draw(xp.asarray(f), xp.asarray([0.75] * 3)))[2] == 3


@pytest.mark.parametrize("decode", ["greedy", "sample", "beam"])
def test_a_model_whose_scores_are_not_finite_is_refused_not_decoded_to_pad(decode):
    """A NaN in the output bias makes every logit NaN: one line naming the cause, never a row of
    PADs (an "empty" sample that would hide the damage)."""
    lm = make_lm()
    lm.head.linear.bias.data[...] = np.nan
    run = {"greedy": lambda: greedy(lm, 3), "sample": lambda: sample(lm, 3, rng=0),
           "beam": lambda: beam_search(lm, batch_size=1, beam_size=2)}[decode]
    with np.errstate(all="ignore"), pytest.raises(ValueError, match="NaN or infinite for every token"):
        run()


def test_weights_that_overflow_are_refused_or_sampled_without_pad():
    """Weights scaled by 1e200 are finite, many logits are not: each row is either refused (no
    finite logit) or drawn among its +inf or finite tokens, never PAD mid-sequence."""
    for seed in range(3):
        lm = make_lm()
        for p in lm.parameters():
            p.data = p.data * 1e200
        with np.errstate(all="ignore"):
            try:
                assert_layout(sample(lm, 16, rng=seed))
            except ValueError as err:
                assert "NaN or infinite for every token" in str(err)


def test_sampling_frequencies():
    """The inverse-CDF draw follows softmax(z / tau) after the filters."""
    from minitransformer.generate.sampling import _inverse_cdf_draw
    z = filter_logits(xp.asarray(np.tile([[1.0, 0.5, 0.0, -0.5, -2.0]], (20000, 1))), top_k=4)
    tok = backend.to_numpy(_inverse_cdf_draw(z, backend.RNG(0).random((20000,), dtype=xp.float64)))
    p = np.exp([1.0, 0.5, 0.0, -0.5])
    p /= p.sum()
    freq = np.bincount(tok, minlength=5) / len(tok)
    assert freq[4] == 0
    np.testing.assert_allclose(freq[:4], p, atol=0.015)


# ---------------------------------------------------------------------------
# EOS, stopping, lengths
# ---------------------------------------------------------------------------
def test_dominant_eos_stops_at_once(any_backend):
    lm, s2s = make_lm(), make_s2s()
    add_eos_bias(lm, 50.0)
    add_eos_bias(s2s, 50.0)
    np.testing.assert_array_equal(greedy(lm, 3), [[BOS, EOS]] * 3)
    np.testing.assert_array_equal(sample(lm, 3, rng=0), [[BOS, EOS]] * 3)
    np.testing.assert_array_equal(greedy(s2s, src=SRC), [[BOS, EOS]] * 3)
    ids, scores = beam_search(lm, batch_size=2, beam_size=3, n_best=3)
    np.testing.assert_array_equal(ids[:, 0], [[BOS, EOS, PAD]] * 2)  # longer ones score lower
    assert (ids[:, 1:, 2] != PAD).all()


def test_rows_stop_independently(any_backend):
    lm = make_lm()
    add_eos_bias(lm, 1.0)
    ids = sample(lm, 16, rng=3)
    assert_layout(ids)
    ends = [np.flatnonzero(r == EOS)[0] + 1 if (r == EOS).any() else len(r) for r in ids]
    assert len(set(ends)) > 2  # rows end at different steps
    assert ids.shape[1] == max(ends)  # the loop stopped with the last row
    assert (ids[:, -1] != PAD).any()


def test_max_len(any_backend):
    lm = make_lm()
    add_eos_bias(lm, -50.0)  # EOS never wins
    assert greedy(lm, 2).shape == (2, 24)  # default: the model's max_len
    out = greedy(lm, 2, max_len=7)
    assert out.shape == (2, 7) and (out != PAD).all()
    assert sample(lm, 2, max_len=9, rng=0).shape == (2, 9)
    assert greedy(lm, prompt=np.array([[BOS, 5, 6]]), max_len=3).shape == (1, 3)  # nothing to add
    ids, _ = beam_search(lm, batch_size=2, beam_size=2, max_len=6)
    assert ids.shape == (2, 1, 6)


def test_seq2seq_default_length():
    small = make_s2s(max_len=24)
    add_eos_bias(small, -50.0)
    assert greedy(small, src=SRC).shape == (3, 24)  # S + 50 = 55, capped at max_len
    big = make_s2s(max_len=64)
    add_eos_bias(big, -50.0)
    assert greedy(big, src=SRC).shape == (3, 55)  # S + 50
    assert greedy(big, src=SRC[:, :2]).shape == (3, 52)


def test_eval_mode_and_restore():
    lm = make_lm(emb_dropout=0.3, attn_dropout=0.3, resid_dropout=0.3)
    add_eos_bias(lm, 1.0)
    lm.train()
    lm.blocks[0].eval()  # a mixed state must come back as it was
    modes = [m.training for m in lm.modules()]
    a = sample(lm, 4, rng=0)
    b = sample(lm, 4, rng=0, use_cache=False)  # dropout active would break this
    np.testing.assert_array_equal(a, b)
    assert [m.training for m in lm.modules()] == modes
    beam_search(lm, batch_size=2, beam_size=2)
    assert [m.training for m in lm.modules()] == modes


# ---------------------------------------------------------------------------
# beam search
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("alpha", [0.6, 0.0, -0.3])
def test_beam1_is_greedy(any_backend, alpha):
    lm, s2s = make_lm("post"), make_s2s()
    add_eos_bias(lm, 1.5)
    add_eos_bias(s2s, 1.0)
    for prompt in (None, np.array([[BOS, 4], [BOS, 9], [BOS, 12]])):
        ids, _ = beam_search(lm, batch_size=3, prompt=prompt, beam_size=1, length_penalty=alpha)
        np.testing.assert_array_equal(ids[:, 0], greedy(lm, 3, prompt=prompt))
    ids, _ = beam_search(s2s, SRC, beam_size=1, length_penalty=alpha)
    np.testing.assert_array_equal(ids[:, 0], greedy(s2s, src=SRC))


def lm_scores(model, ids, alpha):
    """log p(y) / lp(len) recomputed with model.log_prob; ids (M, T) BOS first."""
    model.eval()
    raw = backend.to_numpy(model.log_prob(backend.asarray(ids)))  # (M,)
    length = (ids != PAD).sum(axis=1) - 1
    return raw / gnmt_length_penalty(length, alpha)


def s2s_scores(model, src, ids, alpha):
    """The same by teacher forcing: sum of log softmax at the non-PAD targets."""
    model.eval()
    logp = backend.to_numpy(log_softmax(model.forward(backend.asarray(src), backend.asarray(ids[:, :-1]))))
    tgt = ids[:, 1:]
    picked = np.take_along_axis(logp, tgt[:, :, None], axis=2)[:, :, 0]  # (M, T-1)
    raw = np.where(tgt != PAD, picked, 0.0).sum(axis=1)
    return raw / gnmt_length_penalty((tgt != PAD).sum(axis=1), alpha)


@pytest.mark.parametrize("alpha", [0.6, 0.0])
def test_beam_scores_are_log_probs(any_backend, alpha):
    lm = make_lm()
    add_eos_bias(lm, 1.0)
    ids, scores = beam_search(lm, batch_size=2, beam_size=4, n_best=4, length_penalty=alpha,
                              prompt=np.array([[BOS], [BOS]]))
    assert ids.shape[:2] == (2, 4) and scores.shape == (2, 4)
    assert (np.diff(scores, axis=1) <= 0).all()
    for b in range(2):
        assert len({tuple(r) for r in ids[b]}) == 4  # distinct hypotheses
        assert_layout(ids[b])
    np.testing.assert_allclose(scores.ravel(), lm_scores(lm, ids.reshape(8, -1), alpha), atol=1e-9)

    s2s = make_s2s("post")
    add_eos_bias(s2s, 1.0)
    ids, scores = beam_search(s2s, SRC, beam_size=3, n_best=3, length_penalty=alpha)
    assert (np.diff(scores, axis=1) <= 0).all()
    src = np.repeat(SRC, 3, axis=0)
    np.testing.assert_allclose(scores.ravel(), s2s_scores(s2s, src, ids.reshape(9, -1), alpha),
                               atol=1e-9)


@pytest.mark.parametrize("kind", ["lm", "s2s"])
def test_beam_cache_equal(kind):
    model = make_lm("post") if kind == "lm" else make_s2s("post")
    add_eos_bias(model, 0.5)
    kw = dict(batch_size=3) if kind == "lm" else dict(src=SRC)
    a, sa = beam_search(model, beam_size=4, n_best=2, **kw)
    b, sb = beam_search(model, beam_size=4, n_best=2, use_cache=False, **kw)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(sa, sb, atol=1e-9)


@pytest.mark.parametrize("alpha", [0.6, 0.0])
def test_wide_beam_is_exhaustive(alpha):
    """With max_len 4 (3 generated tokens) a beam of 132 holds every prefix, so beam
    search must return the exact top hypotheses among all possible outputs (PAD
    and BOS are never generated)."""
    lm = make_lm(max_len=4)
    add_eos_bias(lm, 2.0)
    words = [v for v in range(V) if v not in (PAD, BOS, EOS)]
    seqs = [[BOS, EOS]]
    seqs += [[BOS, a, EOS] for a in words]
    seqs += [[BOS, a, b, c] for a, b in itertools.product(words, words) for c in words + [EOS]]
    ids = np.full((len(seqs), 4), PAD)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = s
    best = np.sort(lm_scores(lm, ids, alpha))[::-1][:5]
    got_ids, got = beam_search(lm, batch_size=1, beam_size=132, n_best=5, length_penalty=alpha, max_len=4)
    np.testing.assert_allclose(got[0], best, atol=1e-9)
    np.testing.assert_allclose(lm_scores(lm, got_ids[0], alpha), best, atol=1e-9)


def test_no_source_decodes_to_nothing():
    """Zero sources are an empty answer, not an error from inside NumPy."""
    model, src = make_s2s(), np.zeros((0, 5), dtype=np.int64)
    ids, scores = beam_search(model, src=src, beam_size=3, n_best=2)
    assert ids.shape == (0, 2, 1) and scores.shape == (0, 2)
    assert greedy(model, src=src).shape[0] == 0 and sample(model, src=src).shape[0] == 0


@pytest.mark.parametrize("family", ["lm", "seq2seq"])
def test_pad_and_bos_are_never_generated(family):
    """A model that would rather emit PAD or BOS than anything else still never puts
    either inside a sequence: greedy, sampling (plain, top-k, top-p) and beam search."""
    model = make_lm(max_len=8) if family == "lm" else make_s2s(max_len=8)
    bias = model.head.linear.bias.data
    bias[PAD] = bias[PAD] + 30.0
    bias[BOS] = bias[BOS] + 30.0
    if family == "lm":
        outputs = [greedy(model, 6), sample(model, 64, rng=0), sample(model, 64, rng=1, top_k=3),
                   sample(model, 64, rng=2, top_p=0.9), beam_search(model, batch_size=2, beam_size=4)[0][:, 0]]
    else:
        src = device_src()
        outputs = [greedy(model, src=src), sample(model, src=src, rng=0), sample(model, src=src, rng=1, top_k=3),
                   sample(model, src=src, rng=2, top_p=0.9), beam_search(model, src=src, beam_size=4)[0][:, 0]]
    for ids in outputs:
        for row in ids:
            row = list(row)
            end = row.index(EOS) if EOS in row else len(row)
            assert BOS not in row[1:], f"BOS generated inside {row}"
            assert PAD not in row[:end], f"PAD generated before the end of {row}"


def test_length_penalty():
    assert gnmt_length_penalty(1, 0.6) == 1.0
    assert math.isclose(gnmt_length_penalty(7, 0.6), 2.0 ** 0.6)
    assert gnmt_length_penalty(10, 0.0) == 1.0


# ---------------------------------------------------------------------------
# argument validation
# ---------------------------------------------------------------------------
def test_invalid_arguments():
    lm, s2s = make_lm(), make_s2s()
    bad_sampling = [dict(temperature=0), dict(temperature=-1.0), dict(temperature=float("nan")),
                    dict(top_k=0), dict(top_k=2.5), dict(top_p=0.0), dict(top_p=1.5),
                    dict(top_p=-0.1)]
    for kw in bad_sampling:
        with pytest.raises(ValueError):
            sample(lm, 2, rng=0, **kw)
    bad_common = [
        (greedy, (lm,), dict()),  # no batch size, no prompt
        (greedy, (lm, 2), dict(src=SRC)),  # DecoderLM takes no source
        (greedy, (s2s,), dict()),  # Seq2Seq needs a source
        (greedy, (s2s,), dict(src=SRC, batch_size=2)),
        (greedy, (lm, 2), dict(max_len=25)),  # beyond the model's max_len
        (greedy, (lm,), dict(prompt=np.array([[BOS, 3, 4]]), max_len=2)),
        (greedy, (lm,), dict(prompt=np.array([[BOS, 3, PAD]]))),
        (greedy, (lm, 2), dict(prompt=np.array([[BOS]]))),
        (greedy, (lm,), dict(prompt=np.array([[BOS, 99]]))),
        (greedy, (lm, 0), dict()),
        (sample, (lm, 2), dict(rng="seed")),
        (beam_search, (lm,), dict(batch_size=2, beam_size=0)),
        (beam_search, (lm,), dict(batch_size=2, beam_size=2, n_best=3)),
        (beam_search, (lm,), dict(batch_size=2, length_penalty=float("inf"))),
    ]
    for fn, args, kw in bad_common:
        with pytest.raises(ValueError):
            fn(*args, **kw)
    with pytest.raises(ValueError):
        greedy(s2s, SRC)  # the source passed where the batch size goes
    with pytest.raises(TypeError):
        greedy(object(), 2)
