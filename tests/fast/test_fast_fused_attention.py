"""The attention loop that calls BLAS itself (minitransformer/fast/fused_attention.py)
equals the reference: every case of test_fast_attention's hypothesis test, odd shapes
and strides that BLAS reads through leading dimensions, bad values, float32, both
compiled builds; and its exponential keeps its documented bound."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given

from minitransformer.fast import decode_attention, fused_attention
from minitransformer.fast.engine import blas, compiled, elementary
from minitransformer.nn.attention import causal_mask
from fast_helpers import assert_close, count_calls, FAST, REFERENCE, SETTINGS
from test_fast_attention import _check_attention, attention_cases

pytestmark = pytest.mark.skipif(not (compiled.AVAILABLE and blas.available()),
                                reason="needs Numba and NumPy's ILP64 OpenBLAS (pip install numba)")


@pytest.fixture
def fused(monkeypatch):
    """The loop on, for every size (its parallel build; ``serial`` switches), with a call
    counter: each test proves it ran."""
    calls = count_calls(monkeypatch, fused_attention, "attention_forward")
    monkeypatch.setattr(compiled, "MIN_SIZE", 0)
    monkeypatch.setattr(decode_attention, "usable", lambda *args: False)  # one row a pair: its own tests
    saved = None, compiled.enabled()
    fused_attention.set_enabled(True)
    compiled.set_enabled(True)
    yield calls
    fused_attention.set_enabled(None)  # the default: on where there is one pool
    compiled.set_enabled(saved[1])


def _run(q, k, v, dout, mask=None, drop=None, scale=None):
    """(fast outputs, reference outputs): out, p, dq, dk, dv of each."""
    (out_f, cache_f), (out_r, cache_r) = (FAST["attention_forward"](q, k, v, mask=mask, dropout_mask=drop,
                                                                     scale=scale),
                                          REFERENCE["attention_forward"](q, k, v, mask=mask, dropout_mask=drop,
                                                                         scale=scale))
    assert cache_f.qs is None, "the fast attention did not take the compiled loop"
    grads_f = FAST["attention_backward"](dout, cache_f)[:3]
    grads_r = REFERENCE["attention_backward"](dout, cache_r)[:3]
    return (out_f, cache_f.p, *grads_f), (out_r, cache_r.p, *grads_r)


NAMES = ("out", "p", "dq", "dk", "dv")


@SETTINGS
@given(c=attention_cases())
def test_every_case_of_the_twins_test(fused, c):
    """test_fast_attention's cases (masks of every shape, fully masked rows, dropout, scales,
    bias); the loop runs when there is no bias, the NumPy products otherwise."""
    before = len(fused)
    _check_attention(c)
    assert (len(fused) > before) == (c["bias"] == "none")


@pytest.mark.parametrize("B, H, Tq, Tk, Dh, Dv", [(1, 1, 1, 1, 1, 1), (3, 1, 1, 5, 2, 3), (1, 3, 7, 7, 1, 1),
                                                  (5, 3, 4, 9, 3, 2), (2, 2, 9, 4, 5, 5), (3, 5, 300, 300, 2, 3)])
@pytest.mark.parametrize("layout", ["contiguous", "fused projection", "reversed", "broadcast batch", "column"])
def test_odd_shapes_and_strides(fused, B, H, Tq, Tk, Dh, Dv, layout):
    """T = 1, d = 1, B*H odd (not a multiple of the two threads), Tq != Tk, T = 300 (the key
    blocks); inputs as the fused projection's strided views, reversed (negative strides:
    copied), a batch axis of stride 0, and a head dimension that is not the last in memory."""
    g = np.random.default_rng(B * 1000 + Tq * 10 + Dh)
    if layout == "fused projection" and (Tq != Tk or Dh != Dv):
        pytest.skip("one projection holds q, k and v only for self-attention shapes")
    if layout == "fused projection":
        qkv = g.standard_normal((B, Tq, 3 * H * Dh))  # (B, T, 3 H d), as MultiHeadAttention's
        q, k, v = (qkv[..., i * H * Dh:(i + 1) * H * Dh].reshape(B, Tq, H, Dh).transpose(0, 2, 1, 3)
                   for i in range(3))
    else:
        q, k, v = g.standard_normal((B, H, Tq, Dh)), g.standard_normal((B, H, Tk, Dh)), g.standard_normal((B, H, Tk, Dv))
        if layout == "reversed":
            q, k, v = q[:, :, ::-1], k[:, :, ::-1], v[..., ::-1]
        elif layout == "broadcast batch":
            q, k, v = (np.broadcast_to(a[:1], a.shape) for a in (q, k, v))
        elif layout == "column":  # the last axis strided: each (T, d) matrix is read column-wise
            q, k, v = (np.asfortranarray(a.transpose(3, 2, 1, 0)).transpose(3, 2, 1, 0) for a in (q, k, v))
    dout = g.standard_normal((B, H, Tq, v.shape[3]))
    mask = np.broadcast_to(causal_mask(Tq, Tk), (B, 1, Tq, Tk)).copy() if Tq <= Tk else None
    if mask is not None and B > 1:
        mask[1, ..., Tk // 2:] = False  # padding of the second sequence
    inputs = [a.copy() for a in (q, k, v)]
    fast, ref = _run(q, k, v, dout, mask)
    for name, f, r in zip(NAMES, fast, ref):
        assert_close(name, f, r)
    for name, a, before in zip("qkv", (q, k, v), inputs):
        assert np.array_equal(a, before), f"{name} was written to"


def test_float32_at_float32_precision(fused):
    """The dtype the models train in: float32 in, float32 out, within float32 rounding of
    the float64 reference on the same inputs."""
    g = np.random.default_rng(5)
    B, H, T, d = 4, 2, 33, 8
    qkv = g.standard_normal((B, T, 3 * H * d)).astype(np.float32)
    q, k, v = (qkv[..., i * H * d:(i + 1) * H * d].reshape(B, T, H, d).transpose(0, 2, 1, 3) for i in range(3))
    dout = g.standard_normal((B, H, T, d)).astype(np.float32)
    drop = ((g.random((B, H, T, T)) >= 0.1) / 0.9).astype(np.float32)
    mask = causal_mask(T)
    fast, _ = _run(q, k, v, dout, mask, drop)
    ref, _ = _run(*(a.astype(np.float64) for a in (q, k, v, dout)), mask, drop.astype(np.float64))
    for name, f, r in zip(NAMES, fast, ref):
        assert f.dtype == np.float32, name
        err = np.abs(f - r).max()
        assert err <= 2e-5 * max(1.0, np.abs(r).max()), f"{name}: largest error {err:.2e}"


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # the reference's inf - inf
def test_bad_values_give_the_references_rows(fused):
    """A NaN or +inf logit among a row's keys makes that row NaN, a masked NaN is ignored,
    a row that may see nothing is zeros, and masked keys get exactly zero probability."""
    B, H, T, d = 1, 1, 4, 2
    q = np.ones((B, H, T, d))
    k = np.ones((B, H, T, d))
    v = np.arange(B * H * T * d, dtype=float).reshape(B, H, T, d)
    q[0, 0, 1, 0] = np.nan  # row 1: every logit NaN
    k[0, 0, 3, 0] = np.inf  # key 3: +inf logits (seen only by row 3 under the mask below)
    mask = causal_mask(T)[None, None].copy()
    mask[0, 0, 2, :] = False  # row 2 sees nothing
    (out_f, cache_f), (out_r, cache_r) = (FAST["attention_forward"](q, k, v, mask=mask),
                                          REFERENCE["attention_forward"](q, k, v, mask=mask))
    assert cache_f.qs is None
    np.testing.assert_array_equal(np.isnan(cache_f.p), np.isnan(cache_r.p))
    assert np.isnan(cache_f.p[0, 0, 1]).all() and np.isnan(cache_f.p[0, 0, 3]).all()
    assert (cache_f.p[0, 0, 2] == 0).all() and (out_f[0, 0, 2] == 0).all()
    assert cache_f.p[0, 0, 0, 0] == 1.0 and (cache_f.p[0, 0, 0, 1:] == 0.0).all()  # masked: exactly 0
    np.testing.assert_allclose(out_f[0, 0, 0], out_r[0, 0, 0], rtol=1e-12)


def test_both_builds_give_identical_results(fused, monkeypatch):
    """The loop spread over the threads and the same loop on the calling thread (the build
    small calls take) give the same bits."""
    g = np.random.default_rng(9)
    q, k, v, dout = (g.standard_normal((3, 3, 20, 4)).astype(np.float32) for _ in range(4))
    results = []
    for min_size in (0, 10**9):  # parallel build, then serial
        monkeypatch.setattr(compiled, "MIN_SIZE", min_size)
        out, cache = FAST["attention_forward"](q, k, v, mask=causal_mask(20))
        results.append([out, cache.p, *FAST["attention_backward"](dout, cache)[:3]])
    for name, a, b in zip(NAMES, *results):
        assert np.array_equal(a, b), name


def test_on_by_default_where_there_is_one_pool_and_the_switch(fused):
    """By default on exactly where the compiled loops run on one pool of two threads, so that the
    products of a step all run on it (not with one thread); MINITRANSFORMER_BLAS_ATTENTION=1 or 0 at start turns it
    on or off whatever the pool, and set_enabled switches it."""
    g = np.random.default_rng(2)
    q = g.standard_normal((2, 2, 3, 4))
    fused_attention.set_enabled(False)
    assert FAST["attention_forward"](q, q, q)[1].qs is not None
    fused_attention.set_enabled(True)
    assert FAST["attention_forward"](q, q, q)[1].qs is None
    probe = ("import numpy as np; from minitransformer.fast import fused_attention as f; "
             "from minitransformer.fast.engine import compiled; compiled.usable(np.zeros(1)); "
             "print(f.enabled(), compiled.one_pool() and compiled.threads() > 1)")
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items()
           if k not in ("MINITRANSFORMER_BLAS_ATTENTION", "NUMBA_THREADING_LAYER")}
    env.update(PYTHONPATH=root)
    for value, threads in ((None, "2"), (None, "1"), ("1", "2"), ("1", "1"), ("0", "2")):
        run_env = {**env, "MINITRANSFORMER_THREADS": threads}
        if value is not None:
            run_env["MINITRANSFORMER_BLAS_ATTENTION"] = value
        done = subprocess.run([sys.executable, "-c", probe], env=run_env, capture_output=True, text=True,
                              timeout=120, cwd=root)
        on, one_pool = done.stdout.split()
        expected = one_pool if value is None else str(value == "1")
        assert on == expected, (value, done.stdout, done.stderr[-500:])


def test_the_exponential_keeps_its_bound():
    """exp_nonpositive against numpy.exp on a dense grid of [-700, 0] (and its ends):
    relative error at most EXP_RELATIVE_ERROR; 0 below EXP_FLOOR."""
    x = np.concatenate([np.linspace(-700.0, 0.0, 200_001), -np.logspace(-300, 2.8, 5_000), [0.0, -0.0, -700.0]])
    got = _exp_all(x)
    rel = np.abs(got - np.exp(x)) / np.exp(x)
    worst = int(np.argmax(rel))
    assert rel[worst] <= elementary.EXP_RELATIVE_ERROR, f"relative error {rel[worst]:.2e} at x = {x[worst]!r}"
    assert (got[x == 0.0] == 1.0).all()
    assert (_exp_all(np.array([-700.5, -745.0, -1e300, -np.inf])) == 0.0).all()


def _exp_all(x):
    import numba

    @numba.njit
    def run(x, out):
        for i in range(x.shape[0]):
            out[i] = elementary.exp_nonpositive(x[i])

    out = np.empty_like(x)
    run(x, out)
    return out


def test_blas_reads_views_in_place_and_copies_the_rest():
    """_gemm_ready keeps what BLAS can read through a leading dimension, copies the rest."""
    a = np.zeros((2, 3, 5, 12))
    view = a[..., 4:8]  # rows 12 apart, 4 columns: read in place
    assert fused_attention._gemm_ready(view) is view
    reversed_rows = a[:, :, ::-1]
    copied = fused_attention._gemm_ready(reversed_rows)  # rows in decreasing order: copied
    assert copied is not reversed_rows and copied.flags.c_contiguous and np.array_equal(copied, reversed_rows)
    assert fused_attention._gemm_ready(a[..., ::2]).flags.c_contiguous  # columns apart: copied
    one_row = a[:, :, :1, :3]
    assert fused_attention._gemm_ready(one_row) is one_row  # a single row: any row stride
    assert blas.library_path() is not None


# ---------------------------------------------------------------------------
# Found in review: inputs the loop must convert, or leave to the twin
# ---------------------------------------------------------------------------
def _self_attention(g, B=2, H=2, T=5, d=3, dtype=np.float64):
    return tuple(g.standard_normal((B, H, T, d)).astype(dtype) for _ in range(4))


def test_an_upstream_gradient_of_another_dtype_is_converted(fused):
    """A float64 dout for a float32 cache (strides in other units) and a big-endian one."""
    g = np.random.default_rng(21)
    q, k, v, dout = _self_attention(g, dtype=np.float32)
    _, cache = FAST["attention_forward"](q, k, v, mask=causal_mask(5))
    assert cache.qs is None
    expected = FAST["attention_backward"](dout, cache)[:3]
    for other in (dout.astype(np.float64), dout.astype(">f4")):
        for name, got, want in zip(("dq", "dk", "dv"), FAST["attention_backward"](other, cache)[:3], expected):
            assert got.dtype == np.float32
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=name)


@pytest.mark.parametrize("shape", [(1, 1, 5, 5), (2, 1, 5, 5), (1, 2, 5, 5), (5, 5)])
def test_a_dropout_mask_that_broadcasts(fused, shape):
    """A dropout mask of a broadcastable shape (the twin and the reference take it)."""
    g = np.random.default_rng(22)
    q, k, v, dout = _self_attention(g)
    drop = (g.random(shape) >= 0.3) / 0.7
    fast, ref = _run(q, k, v, dout, causal_mask(5), drop)
    for name, f, r in zip(NAMES, fast, ref):
        assert_close(name, f, r, scale=1 / 0.7)


def test_strides_that_are_not_whole_elements_are_copied(fused):
    """Fields of a record array: strides that are not a whole number of elements (the
    loop counts in elements) are copied first, not rounded."""
    g = np.random.default_rng(23)
    B, H, T, d = 3, 2, 4, 3
    records = np.zeros((B,), dtype=[("a", "<f8", (H, T, d)), ("pad", "u1")])
    records["a"] = g.standard_normal((B, H, T, d))
    q = records["a"]  # batch stride 193 bytes
    assert q.strides[0] % q.itemsize != 0
    k, v, dout = (g.standard_normal((B, H, T, d)) for _ in range(3))
    fast, ref = _run(q, k, v, dout, causal_mask(T))
    for name, f, r in zip(NAMES, fast, ref):
        assert_close(name, f, r)


def test_a_backward_on_another_thread_runs_the_twins_products(fused):
    """Numba's thread pool serves the main thread only: a backward called from another
    thread (of a cache the loop made) runs the NumPy products, with the same result."""
    import threading
    g = np.random.default_rng(24)
    q, k, v, dout = _self_attention(g, B=4, H=3, T=9)
    _, cache = FAST["attention_forward"](q, k, v, mask=causal_mask(9))
    assert cache.qs is None
    expected = FAST["attention_backward"](dout, cache)[:3]
    got = {}
    worker = threading.Thread(target=lambda: got.update(grads=FAST["attention_backward"](dout, cache)[:3]))
    worker.start()
    worker.join()
    for name, a, b in zip(("dq", "dk", "dv"), got["grads"], expected):
        assert_close(name, a, b)


def test_a_scale_of_zero_is_left_to_the_twin(fused):
    """BLAS skips a product whose alpha is 0, so NaN * 0 would vanish: the twin runs it,
    and a NaN query still makes its row NaN, as in the reference."""
    g = np.random.default_rng(25)
    q, k, v, _ = _self_attention(g)
    q[0, 0, 1, 0] = np.nan
    (out_f, cache_f), (out_r, _) = (FAST["attention_forward"](q, k, v, scale=0.0),
                                    REFERENCE["attention_forward"](q, k, v, scale=0.0))
    assert cache_f.qs is not None
    np.testing.assert_array_equal(np.isnan(out_f), np.isnan(out_r))
