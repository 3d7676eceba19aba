"""BLAS called from compiled loops (minitransformer/fast/engine/blas.py): a linear layer's three
products cut into shares of rows, one gemm each, equal NumPy's products for every cut (odd
sizes, more shares than rows, a share of no rows), in both builds, float32 and float64;
the bias is added to every row; and the choice of the threads' kind that puts them on one pool."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from minitransformer.fast.engine import blas, compiled
from fast_helpers import assert_close

pytestmark = pytest.mark.skipif(not (compiled.AVAILABLE and blas.available()),
                                reason="needs Numba and NumPy's ILP64 OpenBLAS (pip install numba)")

SHAPES = [(1, 1, 1), (3, 5, 2), (7, 4, 9), (64, 16, 48), (1000, 33, 17)]  # (N, K, M)


def _operands(N, K, M, dtype, seed=0):
    g = np.random.default_rng(seed)
    return (g.standard_normal((N, K)).astype(dtype), g.standard_normal((K, M)).astype(dtype),
            g.standard_normal(M).astype(dtype), g.standard_normal((N, M)).astype(dtype))


def _tolerance(dtype, terms):
    return (1e-5 if dtype == np.float32 else 1e-12) * terms


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("N, K, M", SHAPES)
@pytest.mark.parametrize("parts", [1, 2, 3, 8])
@pytest.mark.parametrize("build", ["serial", "parallel"])
def test_the_three_products_equal_numpy_for_every_cut(dtype, N, K, M, parts, build):
    """y = xW + b, dx = dy W^T, dW = x^T dy, cut into `parts` shares (more than the rows, at
    times), each of the two builds: within rounding of NumPy's products, every entry written."""
    x, W, b, dy = _operands(N, K, M, dtype)
    y = np.full((N, M), np.nan, dtype=dtype)
    dx = np.full((N, K), np.nan, dtype=dtype)
    dW = np.full((K, M), np.nan, dtype=dtype)
    with blas.one_thread():
        getattr(blas.product, build)(x, W, False, b, True, y, parts)
        getattr(blas.product, build)(dy, W, True, b, False, dx, parts)
        getattr(blas.weight_gradient, build)(x, dy, dW, parts)
    assert_close("y", y.astype(np.float64), x.astype(np.float64) @ W + b, rtol=0, floor=_tolerance(dtype, K * 16))
    assert_close("dx", dx.astype(np.float64), dy.astype(np.float64) @ W.T, rtol=0, floor=_tolerance(dtype, M * 16))
    assert_close("dW", dW.astype(np.float64), x.T.astype(np.float64) @ dy, rtol=0, floor=_tolerance(dtype, N * 16))


def test_without_a_bias_nothing_is_added():
    x, W, b, _ = _operands(50, 6, 4, np.float64)
    y = np.empty((50, 4))
    with blas.one_thread():
        blas.product.serial(x, W, False, b, False, y, 3)
    assert_close("y", y, x @ W, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_layer_helpers_give_the_products_and_the_bias_gradient(dtype, monkeypatch):
    """linear_product and linear_gradients, threaded (every size) and serial: the products, and db
    as the column sums of dy (None without a bias)."""
    x, W, b, dy = _operands(300, 12, 7, dtype, seed=1)
    monkeypatch.setattr(compiled, "threads", lambda: 2)
    for min_work in (0, 10**18):  # every call threaded, in two shares; every call serial, in one
        monkeypatch.setattr(blas, "MIN_WORK", min_work)
        y = blas.linear_product(x, W, b)
        dx, dW, db = blas.linear_gradients(dy, x, W, True)
        assert y.dtype == dx.dtype == dW.dtype == db.dtype == dtype
        floor = _tolerance(dtype, 300 * 16)
        assert_close("y", y.astype(np.float64), x.astype(np.float64) @ W + b, rtol=0, floor=floor)
        assert_close("dx", dx.astype(np.float64), dy.astype(np.float64) @ W.T, rtol=0, floor=floor)
        assert_close("dW", dW.astype(np.float64), x.T.astype(np.float64) @ dy, rtol=0, floor=floor)
        assert_close("db", db.astype(np.float64), dy.astype(np.float64).sum(axis=0), rtol=0, floor=floor)
        assert blas.linear_gradients(dy, x, W, False)[2] is None


def test_a_product_is_cut_into_one_share_per_thread_from_its_minimum_work(monkeypatch):
    """A decoding step's (64, 256) x (256, 768) runs threaded in one share per thread; small's
    (64, 64) x (64, 192), or any product on one thread, runs serial in one share."""
    calls = []

    class Kernel:
        def parallel(self, *args):
            calls.append(("parallel", args[-1]))

        def serial(self, *args):
            calls.append(("serial", args[-1]))

    monkeypatch.setattr(compiled, "threads", lambda: 2)
    blas.run_product(Kernel(), 64, 256, 768)
    blas.run_product(Kernel(), 64, 64, 192)
    monkeypatch.setattr(compiled, "threads", lambda: 1)
    blas.run_product(Kernel(), 64, 256, 768)
    assert calls == [("parallel", 2), ("serial", 1), ("serial", 1)]


def test_usable_only_on_one_pool_one_dtype_and_something_to_multiply(monkeypatch):
    x, W, b, _ = _operands(4, 3, 2, np.float32)
    monkeypatch.setattr(compiled, "one_pool", lambda: True)
    monkeypatch.setattr(compiled, "threads", lambda: 2)
    assert blas.usable(x, W, b)
    assert not blas.usable(x, W.astype(np.float64)), "two dtypes: NumPy's products promote"
    assert not blas.usable(x[:0], W), "no rows: NumPy's products give the empty and zero results"
    monkeypatch.setattr(compiled, "threads", lambda: 1)
    assert not blas.usable(x, W, b), "one thread: NumPy's product is the same one gemm call"
    monkeypatch.setattr(compiled, "threads", lambda: 2)
    monkeypatch.setattr(compiled, "one_pool", lambda: False)
    assert not blas.usable(x, W, b), "the work queue's threads: NumPy's products"


def test_one_pool_whereopenmp_loads_and_products_on_it_with_two_threads():
    """A fresh process takes OpenMP's threads when it can load them (and the loops can call
    BLAS), whatever it imports first: one pool, on which the products run from two threads; the
    work queue when NUMBA_THREADING_LAYER asks for it."""
    probe = ("import numpy as np, numba; from minitransformer.fast.engine import compiled; "
             "x = np.zeros((64, 64), np.float32); compiled.usable(x); from minitransformer.fast.engine import blas; "
             "print(numba.threading_layer(), compiled.one_pool(), blas.usable(x, x))")
    root = str(Path(__file__).resolve().parents[2])
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_THREADING_LAYER"}
    env["PYTHONPATH"] = root

    def run(**extra):
        done = subprocess.run([sys.executable, "-c", probe], env={**env, **extra}, capture_output=True, text=True,
                              timeout=120, cwd=root)
        assert done.returncode == 0, done.stderr[-500:]
        return done.stdout.split()

    omp = blas.openmp_loads()
    assert run(MINITRANSFORMER_THREADS="2") == (["omp", "True", "True"] if omp else ["workqueue", "False", "False"])
    assert run(MINITRANSFORMER_THREADS="1") == (["omp", "True", "False"] if omp else ["workqueue", "False", "False"])
    assert run(MINITRANSFORMER_THREADS="2", NUMBA_THREADING_LAYER="workqueue") == ["workqueue", "False", "False"]
