"""The compiled (Numba) loops of minitransformer.fast.engine.compiled, beyond the equality
tests of test_fast_*.py (which run every kernel with and without them):
many parts of a LayerNorm gradient, results that do not depend on the thread count
nor on the build (threaded or serial), float32, the switch, and the fallback off the
main thread."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from minitransformer import functional, kernels
from minitransformer.fast.engine import compiled, elementary, parallel

pytestmark = pytest.mark.skipif(not compiled.AVAILABLE, reason="Numba is not installed (pip install minitransformer[fast])")

REFERENCE = functional.REFERENCE
FAST = functional.FAST


@pytest.fixture
def numba_on():
    """Compiled loops on, for arrays of every size."""
    saved = compiled.enabled(), compiled.MIN_SIZE
    compiled.set_enabled(True)
    compiled.MIN_SIZE = 0
    yield
    compiled.set_enabled(saved[0])
    compiled.MIN_SIZE = saved[1]


def _layernorm_both(x, w, b, dy):
    y, cache = FAST["layernorm_forward"](x, w, b)
    return (y, cache.xhat, cache.rstd) + tuple(FAST["layernorm_backward"](dy, cache))


@pytest.mark.parametrize("N, D", [(1, 1), (255, 3), (256, 5), (1000, 64), (2049, 7)])
def test_layernorm_many_parts_equals_reference(numba_on, N, D):
    """Gradients summed over several parts of 256 rows equal the reference's single sum."""
    g = np.random.default_rng(N * 31 + D)
    x, w, b, dy = g.standard_normal((N, D)) * 3 + 1, g.standard_normal(D), g.standard_normal(D), g.standard_normal((N, D))
    fast = _layernorm_both(x, w, b, dy)
    y_r, cache_r = REFERENCE["layernorm_forward"](x, w, b)
    ref = (y_r, cache_r.xhat, cache_r.rstd) + tuple(REFERENCE["layernorm_backward"](dy, cache_r))
    for name, f, r in zip(["y", "xhat", "rstd", "dx", "dw", "db"], fast, ref):
        assert f.shape == r.shape and f.dtype == r.dtype, f"{name}: {f.shape} {f.dtype} vs {r.shape} {r.dtype}"
        err = np.abs(f - r).max()
        assert err <= 1e-12 * max(1.0, np.abs(r).max()) * (1 + N / 256), f"{name}: largest error {err:.3g}"


def test_results_do_not_depend_on_the_thread_count(numba_on):
    g = np.random.default_rng(0)
    x, w, b, dy = g.standard_normal((3000, 40)), g.standard_normal(40), g.standard_normal(40), g.standard_normal((3000, 40))
    h = g.standard_normal(300_000)
    saved = parallel.threads()
    outs = []
    try:
        for n in (1, 2, 3):
            parallel.set_threads(n)
            outs.append(_layernorm_both(x, w, b, dy) + FAST["gelu_forward"](h))
    finally:
        parallel.set_threads(saved)
    for other in outs[1:]:
        for i, (a, c) in enumerate(zip(outs[0], other)):
            np.testing.assert_array_equal(a, c, err_msg=f"output {i} differs between 1 and more threads")


def test_float32_stays_float32_and_agrees_with_numpy_path(numba_on):
    g = np.random.default_rng(1)
    x = (g.standard_normal((512, 64)) * 4).astype(np.float32)
    w, b = g.standard_normal(64).astype(np.float32), g.standard_normal(64).astype(np.float32)
    dy = g.standard_normal((512, 64)).astype(np.float32)
    on = _layernorm_both(x, w, b, dy) + FAST["gelu_forward"](x)
    compiled.set_enabled(False)
    off = _layernorm_both(x, w, b, dy) + FAST["gelu_forward"](x)
    for i, (a, c) in enumerate(zip(on, off)):
        assert a.dtype == np.float32, f"output {i} is {a.dtype}"
        np.testing.assert_allclose(a, c, rtol=2e-5, atol=2e-5 * np.abs(c).max(), err_msg=f"output {i}")


def test_gelu_does_not_overflow_and_keeps_nan(numba_on):
    x = np.array([1e4, -1e4, 3e38, -3e38, np.nan, 0.0], dtype=np.float32)
    y, dydx = FAST["gelu_forward"](x)
    np.testing.assert_array_equal(y[[0, 1, 5]], np.float32([1e4, 0.0, 0.0]))
    np.testing.assert_array_equal(dydx[[0, 1, 5]], np.float32([1.0, 0.0, 0.5]))
    assert np.isnan(y[4]) and np.isnan(dydx[4])
    assert y[2] == np.float32(3e38) and dydx[2] == 1.0 and y[3] == 0.0 and dydx[3] == 0.0


def test_the_switch_and_the_other_threads():
    """set_enabled(False) and any thread but the main one get the NumPy kernels (the
    Numba work queue serves one caller at a time); arrays of other dtypes too."""
    a = np.zeros(3)
    saved = compiled.enabled()
    try:
        compiled.set_enabled(True)
        assert compiled.usable(a)  # any size: a small one runs on this thread (Kernel)
        assert not compiled.usable(a.astype(np.int64)) and not compiled.usable(a.astype(np.float16))
        seen = []
        t = threading.Thread(target=lambda: seen.append(compiled.usable(a)))
        t.start()
        t.join()
        assert seen == [False]
        compiled.set_enabled(False)
        assert not compiled.usable(a)
    finally:
        compiled.set_enabled(saved)


def _kernel_inputs(n_rows, D, dtype):
    """Arguments of the compiled kernels for an (n_rows, D) input (the logits of the
    cross-entropy: n_rows rows of D classes)."""
    g = np.random.default_rng(n_rows + D)
    x = (g.standard_normal((n_rows, D)) * 3).astype(dtype)
    w, b, dy = g.standard_normal(D).astype(dtype), g.standard_normal(D).astype(dtype), g.standard_normal((n_rows, D)).astype(dtype)
    from minitransformer.fast.elementwise import _table
    flat = x.reshape(-1)
    gelu = (flat, _table(dtype), np.empty_like(flat), np.empty_like(flat))
    ln_fwd = (x, w, b, 1e-5, np.empty_like(x), np.empty_like(x), np.empty(n_rows, dtype=dtype))
    xhat, rstd = ln_fwd[5], ln_fwd[6]
    compiled.layernorm_forward.parallel(*ln_fwd)
    P = compiled.parts(n_rows)
    ln_bwd = (dy, xhat, rstd, w, np.empty_like(dy), np.zeros((P, D)), np.zeros((P, D)))
    t = g.integers(0, D, size=n_rows)
    ce_fwd = (x, t, 0.1, np.empty_like(x), np.empty(n_rows, dtype=dtype))
    compiled.cross_entropy_forward.parallel(*ce_fwd)
    w = np.where(g.random(n_rows) < 0.2, 0.0, 1.0 / n_rows).astype(dtype)  # some rows ignored
    off = 0.1 / (D - 1) if D > 1 else 0.0
    ce_bwd = (ce_fwd[3], t, w, off, 0.9 - off, np.empty_like(x))
    return {"gelu_exact": gelu, "layernorm_forward": ln_fwd, "layernorm_backward": ln_bwd,
            "cross_entropy_forward": ce_fwd, "cross_entropy_backward": ce_bwd}


@pytest.mark.parametrize("n_rows, D, dtype", [(1, 1, np.float64), (64, 256, np.float32), (300, 7, np.float64),
                                              (1024, 64, np.float32)])
def test_the_serial_build_gives_what_the_threaded_one_gives(n_rows, D, dtype):
    """Below MIN_SIZE elements a kernel runs its serial build (no threads to wake); it must give
    the threaded build's results bit for bit, at every size, or, in a loop whose sums the compiler
    may regroup, within a few units in the last place of the largest value."""
    saved = parallel.threads()
    parallel.set_threads(2)
    try:
        for name, args in _kernel_inputs(n_rows, D, dtype).items():
            kernel = getattr(compiled, name)
            outs = []
            for build in (kernel.parallel, kernel.serial):
                copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
                compiled.usable(copies[0])  # sets the thread count
                build(*copies)
                outs.append([c for c in copies if isinstance(c, np.ndarray)])
            for i, (a, c) in enumerate(zip(*outs)):
                if kernel.regroups_sums and np.issubdtype(a.dtype, np.floating):
                    ulp = np.finfo(a.dtype).eps * max(float(np.abs(a).max(initial=0.0)), 1.0)
                    np.testing.assert_allclose(a, c, rtol=0, atol=16 * ulp,
                                               err_msg=f"{name}: array {i} differs between the builds")
                else:
                    np.testing.assert_array_equal(a, c, err_msg=f"{name}: array {i} differs between the builds")
    finally:
        parallel.set_threads(saved)


def test_a_kernel_takes_its_serial_build_below_min_size(monkeypatch):
    if compiled.numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba has one thread here: every loop takes its serial build")
    calls = []
    kernel = compiled.gelu_exact
    monkeypatch.setattr(kernel, "parallel", lambda *a: calls.append("parallel"))
    monkeypatch.setattr(kernel, "serial", lambda *a: calls.append("serial"))
    saved = parallel.threads()
    try:
        parallel.set_threads(2)
        assert compiled.usable(np.zeros(1))  # (it sets Numba's thread count to the library's)
        kernel(np.zeros(compiled.MIN_SIZE - 1))
        kernel(np.zeros(compiled.MIN_SIZE))
    finally:
        parallel.set_threads(saved)
    assert calls == ["serial", "parallel"]


def test_float32_gelu_keeps_its_documented_bound(numba_on):
    """float32 arrays take the gather-free loop: within GELU32_Y_BOUND |x| in y and
    GELU32_DYDX_BOUND in dy/dx of the float64 reference (SciPy's erf) on the same inputs,
    on a dense grid of [-20, 20], its ends and beyond; both builds give the same bits."""
    from scipy.special import ndtr
    # the breakpoints: |z| = 1/2 (x = 0.707..) where the polynomials meet, with its float32 neighbours;
    # e^{-z^2} leaving float32's normal numbers at z^2 = 87 (x = 13.19); the erfcx clamp at |z| = 10
    edges = np.float32([0.5 * np.sqrt(2), np.sqrt(2 * 87.0), 10 * np.sqrt(2)])
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(0)), np.nextafter(edges, np.float32(99))])
    x = np.concatenate([np.linspace(-20, 20, 400_001), edges, -edges,
                        [0.0, -0.0, 1e-30, -1e-30, 87.0, -87.0, 1e4, -1e4]]).astype(np.float32)
    y, dydx = FAST["gelu_forward"](x)
    assert y.dtype == dydx.dtype == np.float32
    x64 = x.astype(np.float64)
    cdf = ndtr(x64)
    y_err = np.abs(y - x64 * cdf) / np.maximum(np.abs(x64), 1e-30)
    d_err = np.abs(dydx - (cdf + x64 * np.exp(-0.5 * x64 * x64) / np.sqrt(2 * np.pi)))
    for name, err, bound in (("y / |x|", y_err, elementary.GELU32_Y_BOUND), ("dy/dx", d_err, elementary.GELU32_DYDX_BOUND)):
        worst = int(np.argmax(err))
        assert err[worst] <= bound, f"GELU float32 {name}: error {err[worst]:.3g} at x = {x[worst]!r}"
    small = x[:5000].copy()  # below MIN_SIZE: the serial build; then the threaded one
    serial = [np.empty_like(small), np.empty_like(small)]
    threaded = [np.empty_like(small), np.empty_like(small)]
    compiled.gelu_exact_float32.serial(small, *serial)
    compiled.gelu_exact_float32.parallel(small, *threaded)
    for a, b in zip(serial, threaded):
        np.testing.assert_array_equal(a, b)


def test_one_library_thread_takes_the_serial_build_and_more_the_threaded(numba_on, monkeypatch):
    """With one thread (a data-parallel rank) a large loop runs its serial build, not Numba's
    work queue with one worker (which stalled training steps); with two, the threaded build."""
    if compiled.numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba has one thread here")
    kernel = compiled.gelu_exact_float32
    ran = []
    monkeypatch.setattr(kernel, "serial", lambda *a: ran.append("serial"))
    monkeypatch.setattr(kernel, "parallel", lambda *a: ran.append("threaded"))
    x = np.ones(1 << 16, dtype=np.float32)
    saved = parallel.threads()
    try:
        for n in (1, 2):
            parallel.set_threads(n)
            assert compiled.usable(x)
            kernel(x, np.empty_like(x), np.empty_like(x))
    finally:
        parallel.set_threads(saved)
    assert ran == ["serial", "threaded"]
