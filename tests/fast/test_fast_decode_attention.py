"""The decoding step's loop (minitransformer/fast/decode_attention.py) equals the reference:
one query row over time-major keys and values (the KV cache's views), every mask the
decoders pass, odd shapes, bad values, float32; and it is taken exactly when
the call looks like a decoding step."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from minitransformer.fast import decode_attention
from minitransformer.fast.engine import compiled
from minitransformer.nn.attention import causal_mask
from minitransformer.nn.kv_cache import KVCache
from fast_helpers import assert_close, count_calls, FAST, REFERENCE, SETTINGS

pytestmark = pytest.mark.skipif(not compiled.AVAILABLE, reason="needs Numba (pip install numba)")


@pytest.fixture
def loop(monkeypatch):
    """The loop on, with a call counter: each test proves it ran."""
    calls = count_calls(monkeypatch, decode_attention, "attention_forward")
    saved = compiled.enabled()
    compiled.set_enabled(True)
    yield calls
    compiled.set_enabled(saved)


def _cached(k, v):
    """k (B, H, T, Dh), v (B, H, T, Dv) as a KV cache returns them: time-major views."""
    cache = KVCache(capacity=k.shape[2] + 3)
    return cache.append(k, v)


def _run(q, k, v, dout, mask=None, scale=None):
    """(fast outputs, reference outputs): out, p, dq, dk, dv of each."""
    (out_f, cache_f), (out_r, cache_r) = (FAST["attention_forward"](q, k, v, mask=mask, scale=scale),
                                          REFERENCE["attention_forward"](q, k, v, mask=mask, scale=scale))
    grads_f = FAST["attention_backward"](dout, cache_f)[:3]
    grads_r = REFERENCE["attention_backward"](dout, cache_r)[:3]
    return (out_f, cache_f.p, *grads_f), (out_r, cache_r.p, *grads_r)


NAMES = ("out", "p", "dq", "dk", "dv")


def _mask(kind, B, H, T, g):
    if kind == "none":
        return None
    if kind == "causal":  # the bottom row of the triangle, what DecoderLM.step passes: all True
        return causal_mask(1, T)
    if kind == "padding":  # (B, 1, 1, T), a key of some sequences hidden
        return g.random((B, 1, 1, T)) > 0.3
    m = g.random((B, H, 1, T)) > 0.5  # (B, H, 1, T), one row that sees nothing
    m[0, 0, 0] = False
    return m


@SETTINGS
@given(B=st.integers(1, 5), H=st.integers(1, 3),
       T=st.integers(1, 40), Dh=st.integers(1, 9), Dv=st.integers(1, 9),
       kind=st.sampled_from(["none", "causal", "padding", "any"]), scale=st.sampled_from([None, 0.3, -2.0]),
       seed=st.integers(0, 2 ** 16))
def test_equals_the_reference(loop, B, H, T, Dh, Dv, kind, scale, seed):
    """Out, probabilities, and the gradients through the cache it returns, at 1e-12."""
    g = np.random.default_rng(seed)
    q = g.standard_normal((B, 1, H, Dh)).transpose(0, 2, 1, 3)  # (B, H, 1, Dh), heads side by side
    k, v = _cached(g.standard_normal((B, H, T, Dh)), g.standard_normal((B, H, T, Dv)))
    dout = g.standard_normal((B, H, 1, Dv))
    before = len(loop)
    fast, ref = _run(q, k, v, dout, _mask(kind, B, H, T, g), scale)
    assert len(loop) == before + 1, "the decoding loop did not run"
    # the size of the terms each tensor is summed from (as test_fast_attention's): a
    # gradient that cancels to 0 in the reference is held to rounding of those terms
    s = abs(scale) if scale is not None else 1 / np.sqrt(Dh)
    dp = np.abs(dout).max() * np.abs(v).max()
    sizes = [np.abs(v).max(), 1.0, s * dp * np.abs(k).max(), s * dp * np.abs(q).max(), np.abs(dout).max()]
    for name, f, r, size in zip(NAMES, fast, ref, sizes):
        assert_close(name, f, r, scale=size)


@pytest.mark.parametrize("B, H, T, d", [(1, 1, 1, 1), (3, 1, 1, 64), (7, 5, 3, 1), (64, 4, 64, 64), (2, 3, 101, 16)])
def test_odd_shapes_in_float32(loop, B, H, T, d):
    """T = 1, d = 1, B*H odd, the tomczak model's step; float32 in and out, within
    float32 rounding of the float64 reference on the same inputs."""
    g = np.random.default_rng(B * 100 + T)
    q = g.standard_normal((B, H, 1, d)).astype(np.float32)
    k, v = (g.standard_normal((B, H, T, d)).astype(np.float32) for _ in range(2))
    out, cache = FAST["attention_forward"](q, *_cached(k, v), mask=causal_mask(1, T))
    ref, ref_cache = REFERENCE["attention_forward"](*(a.astype(np.float64) for a in (q, k, v)))
    assert len(loop) == 1 and out.dtype == cache.p.dtype == np.float32
    for name, f, r in (("out", out, ref), ("p", cache.p, ref_cache.p)):
        err = np.abs(f - r).max()
        assert err <= 2e-6 * max(1.0, np.abs(r).max()) * np.sqrt(d), f"{name}: largest error {err:.2e}"


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the reference's inf - inf
@pytest.mark.parametrize("mask_kind", ["partial", "none", "all true"])
def test_bad_values_give_the_references_rows(loop, mask_kind):
    """A NaN or +inf logit among a row's keys makes that row NaN, a masked NaN is ignored,
    a row of -inf logits or that may see nothing is zeros, and masked keys get exactly zero
    probability; with a mask that hides keys, without one (a row of Trues stands in), or one
    that hides none (as every decoding step's)."""
    B, H, T, d = 5, 1, 5, 2
    q = np.ones((B, H, 1, d))
    k, v = np.ones((B, H, T, d)), np.arange(B * H * T * d, dtype=float).reshape(B, H, T, d)
    q[0, 0, 0, 0] = np.nan  # sequence 0: every logit NaN
    k[1, 0, 3, 0] = np.inf  # sequence 1: a +inf logit
    q[4, 0, 0, :] = -np.inf  # sequence 4: every logit -inf (k > 0)
    mask = None if mask_kind == "none" else np.ones((B, 1, 1, T), dtype=bool)
    if mask_kind == "partial":
        k[2, 0, 4, 0] = np.nan  # sequence 2: a NaN logit, masked
        mask[2, ..., 4] = False
        mask[3] = False  # sequence 3 sees nothing
    kc, vc = _cached(k, v)
    (out_f, cache_f), (out_r, cache_r) = (FAST["attention_forward"](q, kc, vc, mask=mask),
                                          REFERENCE["attention_forward"](q, k, v, mask=mask))
    assert len(loop) == 1
    for name, f, r in (("p", cache_f.p, cache_r.p), ("out", out_f, out_r)):
        np.testing.assert_array_equal(np.isnan(f), np.isnan(r), err_msg=f"{name}: NaN in other places")
        finite = ~np.isnan(r)
        assert_close(name, np.where(finite, f, 0), np.where(finite, r, 0), scale=np.abs(v).max())
    assert np.isnan(cache_f.p[0]).all() and np.isnan(cache_f.p[1]).all()
    assert (cache_f.p[4] == 0).all() and (out_f[4] == 0).all()
    if mask_kind == "partial":
        assert not np.isnan(cache_f.p[2]).any() and cache_f.p[2, 0, 0, 4] == 0.0
        assert (cache_f.p[3] == 0).all() and (out_f[3] == 0).all()


def test_an_infinite_scale_gives_the_references_row(loop):
    """scale = inf: logits of +-inf, never an inf - inf of the loop's own making."""
    q = np.array([[[[-1.0, -1.0]]]])  # (1, 1, 1, 2)
    k, v = np.ones((1, 1, 3, 2)), np.arange(6.0).reshape(1, 1, 3, 2)
    (out_f, cache_f), (out_r, cache_r) = (FAST["attention_forward"](q, *_cached(k, v), scale=np.inf),
                                          REFERENCE["attention_forward"](q, k, v, scale=np.inf))
    assert len(loop) == 1
    np.testing.assert_array_equal(cache_f.p, cache_r.p)
    np.testing.assert_array_equal(out_f, out_r)


def test_taken_only_for_a_decoding_step(loop):
    """Not taken for more than MAX_QUERIES rows, keys that are not time-major, a bias, a
    dropout mask, or mixed dtypes: there the twin runs, and still equals
    the reference."""
    g = np.random.default_rng(8)
    B, H, T, d = 2, 2, 6, 3
    k, v = _cached(g.standard_normal((B, H, T, d)), g.standard_normal((B, H, T, d)))
    q = g.standard_normal((B, H, 1, d))
    cases = {
        "too many rows": dict(q=g.standard_normal((B, H, decode_attention.MAX_QUERIES + 1, d))),
        "not time-major": dict(k=np.ascontiguousarray(k), v=np.ascontiguousarray(v)),
        "bias": dict(bias=g.standard_normal((1, H, 1, T))),
        "dropout": dict(dropout_mask=(g.random((B, H, 1, T)) > 0.1) / 0.9),
        "float32 keys": dict(k=k.astype(np.float32)),
    }
    for name, change in cases.items():
        args = dict(q=q, k=k, v=v) | change
        out_f, _ = FAST["attention_forward"](**args)
        assert not loop, f"{name}: the decoding loop ran"
        if name != "float32 keys":
            assert_close(f"out ({name})", out_f, REFERENCE["attention_forward"](**args)[0])
    FAST["attention_forward"](q, k, v)
    assert len(loop) == 1


def test_a_decoder_steps_through_its_cache_as_the_full_forward(loop):
    """DecoderLM.step with the fast kernels: the loop runs in every layer of every step,
    and the logits equal the full forward's (the KV cache gives exactly the full forward)."""
    from minitransformer import kernels
    from minitransformer.models import DecoderLM, DecoderLMConfig
    model = DecoderLM(DecoderLMConfig(vocab_size=11, max_len=12, d_model=8, n_heads=2, n_layers=2, d_ff=16,
                                      seed=4))
    model.eval()
    ids = np.random.default_rng(0).integers(3, 11, size=(3, 9))
    with kernels.scope("fast"):
        full = model.forward(ids)  # (3, 9, V)
        state = model.init_state()
        steps = [model.step(ids[:, t:t + 1], state) for t in range(9)]  # (3, V) each
    assert len(loop) == 9 * 2
    assert_close("logits", np.stack(steps, axis=1), full, rtol=1e-5, scale=np.abs(full).max())  # float32


@pytest.mark.parametrize("kind", ["lm", "s2s"])
def test_beam_search_with_the_loop_equals_it_without_the_cache(loop, kind):
    """Beam search reorders the caches between steps (``KVCache.reorder``); a Seq2Seq's
    decoder keeps a time-major self-attention cache beside the encoder's static one. With
    the loop in every cached step, the hypotheses and scores equal those of re-running
    the whole prefix (no cache, no loop)."""
    from minitransformer import backend, kernels
    from minitransformer.generate import beam_search
    from minitransformer.models import Seq2Seq, Seq2SeqConfig
    from minitransformer.models import DecoderLM, DecoderLMConfig
    with backend.dtype_scope("float64"):
        if kind == "lm":
            model = DecoderLM(DecoderLMConfig(vocab_size=13, max_len=16, d_model=16, n_heads=2, n_layers=2,
                                              d_ff=32, norm="post", seed=7))
            kw = dict(batch_size=3)
        else:
            model = Seq2Seq(Seq2SeqConfig(src_vocab_size=11, tgt_vocab_size=13, max_len=16, d_model=16,
                                          n_heads=2, n_enc_layers=2, n_dec_layers=2, d_ff=32, norm="post",
                                          seed=11))
            kw = dict(src=np.array([[3, 4, 5, 6, 7], [8, 3, 9, 0, 0], [10, 4, 4, 6, 0]]))
    model.head.linear.bias.data[2] += 0.5  # EOS likelier: hypotheses of different lengths
    with kernels.scope("fast"):
        a, scores_a = beam_search(model, beam_size=4, n_best=2, **kw)
        ran = len(loop)
        b, scores_b = beam_search(model, beam_size=4, n_best=2, use_cache=False, **kw)
    assert ran > 0 and len(loop) == ran, "the loop ran in the cached search only"
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(scores_a, scores_b, atol=1e-9)
