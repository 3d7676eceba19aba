"""The sampling draw's loop (minitransformer/fast/decode.py) gives the reference's tokens
exactly: random rows with banned tokens, uniforms on the CDF's steps, NaN and infinite
rows; sample() takes it with the fast set and Numba, and draws the same sequences."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, strategies as st

from minitransformer import kernels
from minitransformer.fast import decode as fast_decode
from minitransformer.fast.engine import compiled
from minitransformer.generate import sampling
from minitransformer.models import DecoderLM, DecoderLMConfig
from fast_helpers import count_calls, SETTINGS

pytestmark = pytest.mark.skipif(not compiled.AVAILABLE, reason="needs Numba (pip install numba)")


def _both(z, u):
    """(the loop's tokens, the reference's) for the same z (N, V) and u (N,)."""
    assert fast_decode.usable(z, u)
    return fast_decode.inverse_cdf_draw(z, u), sampling._inverse_cdf_draw(z, u)


def _assert_same(z, u):
    fast, ref = _both(z, u)
    assert fast.dtype == ref.dtype == np.int64 and fast.shape == ref.shape
    rows = np.flatnonzero(fast != ref)
    assert rows.size == 0, (f"tokens differ in {rows.size} of {len(ref)} rows; first row {rows[0]}: "
                            f"loop {fast[rows[0]]}, reference {ref[rows[0]]}, u {u[rows[0]]!r}")


@SETTINGS
@given(N=st.integers(1, 9), V=st.integers(1, 40), spread=st.sampled_from([0.1, 3.0, 40.0, 800.0]),
       banned=st.floats(0.0, 0.9), seed=st.integers(0, 2 ** 32 - 1),
       u_kind=st.sampled_from(["random", "zero", "below_one"]))
def test_the_loop_draws_the_reference_tokens(N, V, spread, banned, seed, u_kind):
    """Any logits (a spread of 800 underflows most of a row's exponentials to exactly 0),
    tokens banned with -inf, uniforms anywhere in [0, 1)."""
    g = np.random.default_rng(seed)
    z = g.standard_normal((N, V)) * spread  # (N, V)
    z[g.random((N, V)) < banned] = -np.inf
    z[np.arange(N), g.integers(0, V, N)] = g.standard_normal(N)  # at least one finite entry a row
    u = {"random": g.random(N), "zero": np.zeros(N), "below_one": np.full(N, np.nextafter(1.0, 0.0))}[u_kind]
    _assert_same(z, u)


@pytest.mark.parametrize("V", [1, 2, 8, 64])
def test_uniforms_on_the_steps_of_the_cdf(V):
    """Equal logits: the CDF is 1, 2, .., V, and u = k / V puts the target exactly on step k
    (powers of two: no rounding); one ulp either side too."""
    k = np.arange(V, dtype=np.float64)
    u = np.concatenate([k / V, np.nextafter(k / V, 1.0), np.nextafter(k / V, -1.0).clip(0.0)])  # (3V,)
    _assert_same(np.zeros((u.size, V)), u)


@SETTINGS
@given(V=st.sampled_from([3, 17, 40, 112]), seed=st.integers(0, 2 ** 32 - 1))
def test_uniforms_on_the_steps_of_random_rows(V, seed):
    """Targets within rounding of a CDF step of rows of random logits: u = F_k / F for a
    random k (the reference's own cumsum), and one ulp either side. A loop that normalised
    first, or summed in another order than cumsum, draws other tokens here."""
    g = np.random.default_rng(seed)
    z = g.standard_normal((12, V)) * 3.0  # (12, V)
    z[g.random((12, V)) < 0.3] = -np.inf
    z[np.arange(12), g.integers(0, V, 12)] = 0.0  # at least one finite entry a row
    cdf = np.cumsum(np.exp(z - z.max(axis=1, keepdims=True)), axis=1)  # (12, V), as the reference forms it
    u = cdf[np.arange(12), g.integers(0, V, 12)] / cdf[:, -1]  # (12,), on a step
    below_one = np.nextafter(1.0, 0.0)
    u = np.concatenate([u, np.nextafter(u, 2.0), np.nextafter(u, -1.0)]).clip(0.0, below_one)  # (36,)
    _assert_same(np.concatenate([z, z, z]), u)


def test_rows_with_nan_or_infinite_logits_give_the_reference_tokens():
    z = np.array([[0.0, np.nan, 1.0, 2.0],       # a NaN logit: the whole row's p is NaN
                  [0.0, np.inf, 1.0, 2.0],       # +inf: inf - inf is NaN there, the others 0
                  [-np.inf, -np.inf, 3.0, -np.inf],  # one token allowed
                  [1e300, -1e300, 0.0, -np.inf],  # exponentials of 0 and of -huge
                  [-1e3, -1e3, -1e3, -1e3]])      # all equal and very negative
    with np.errstate(invalid="ignore"):  # inf - inf and NaN - NaN, on both sides
        for u in (np.zeros(5), np.full(5, 0.5), np.full(5, np.nextafter(1.0, 0.0))):
            _assert_same(z, u)
        # u = 1, outside the contract, is where the cap at the last positive token binds: both keep it
        _assert_same(z, np.ones(5))


def test_only_host_float64_arrays_on_the_main_thread_take_the_loop():
    z, u = np.zeros((2, 3)), np.zeros(2)
    assert fast_decode.usable(z, u)
    assert not fast_decode.usable(z.astype(np.float32), u)
    assert not fast_decode.usable(z[0], u)  # one row, not (N, V)
    assert not fast_decode.usable(z, u.astype(np.float32))
    assert not fast_decode.usable(z, u[:, None])  # (N, 1), not (N,)
    assert not fast_decode.usable(z, u[:1]) and not fast_decode.usable(z, np.zeros(3))  # not one uniform a row
    said = []
    worker = threading.Thread(target=lambda: said.append(fast_decode.usable(z, u)))
    worker.start()
    worker.join()
    assert said == [False]  # Numba's work queue serves the main thread (compiled.usable)
    saved = compiled.enabled()
    compiled.set_enabled(False)
    try:
        assert not fast_decode.usable(z, u)
    finally:
        compiled.set_enabled(saved)


@pytest.mark.parametrize("options", [{}, {"temperature": 0.7, "top_k": 5}, {"top_p": 0.8}])
def test_sample_takes_the_loop_and_draws_what_the_reference_draw_does(monkeypatch, options):
    """With the fast set and Numba, sample() draws through the loop, and the same seed gives
    the same sequences as with the reference draw; with the reference set it is not called."""
    model = DecoderLM(DecoderLMConfig(vocab_size=17, max_len=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, seed=3))
    calls = count_calls(monkeypatch, fast_decode, "inverse_cdf_draw")
    with kernels.scope("fast"):
        looped = sampling.sample(model, batch_size=6, rng=11, **options)
        assert len(calls) >= looped.shape[1] - 1  # a draw per step
        monkeypatch.setattr(fast_decode, "usable", lambda z, u: False)
        drawn = sampling.sample(model, batch_size=6, rng=11, **options)
    np.testing.assert_array_equal(looped, drawn)
    monkeypatch.undo()
    calls = count_calls(monkeypatch, fast_decode, "inverse_cdf_draw")
    with kernels.scope("reference"):
        sampling.sample(model, batch_size=6, rng=11, **options)
    assert calls == []
