"""The fast linear kernels (minitransformer/fast/linear.py) equal the reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer.fast.engine import blas, compiled
from fast_helpers import (
    assert_close, assert_unchanged, covers, dev, FAST, host, REFERENCE, run_forward, SETTINGS,
)

POOL = pytest.mark.skipif(not (compiled.AVAILABLE and blas.available()),
                          reason="needs Numba and NumPy's ILP64 OpenBLAS (pip install numba)")


@pytest.fixture(params=[pytest.param("compiled loops", marks=POOL), "numpy"])
def linear_products(request, monkeypatch):
    """The products as compiled loops on one pool of two threads (as where OpenMP's threads run the
    loops; every size threaded), or NumPy's: yields the way and the list of the compiled loops' calls."""
    calls = []
    if request.param == "numpy":
        monkeypatch.setattr(blas, "usable", lambda *arrays: False)
    else:
        monkeypatch.setattr(compiled, "one_pool", lambda: True)
        monkeypatch.setattr(compiled, "threads", lambda: 2)
        monkeypatch.setattr(blas, "MIN_WORK", 0)
        for name in ("linear_product", "linear_gradients"):
            monkeypatch.setattr(blas, name, lambda *a, run=getattr(blas, name): (calls.append(1), run(*a))[1])
    yield request.param, calls


# ---------------------------------------------------------------------------
# linear
# ---------------------------------------------------------------------------
@covers("linear_forward", "linear_backward")
@SETTINGS
@given(lead=st.lists(st.integers(0, 5), min_size=0, max_size=3), d_in=st.integers(1, 9),
       d_out=st.integers(1, 9), bias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_linear_forward(any_backend, linear_products, lead, d_in, d_out, bias, seed):
    """Both ways of making the products (compiled loops, NumPy's) against the reference."""
    g = np.random.default_rng(seed)
    way, calls = linear_products
    calls.clear()
    x, W, b = g.standard_normal(tuple(lead) + (d_in,)), g.standard_normal((d_in, d_out)), g.standard_normal(d_out)
    xd, Wd, bd = dev(x), dev(W), (dev(b) if bias else None)
    (y_f, cache_f), (y_r, cache_r) = run_forward("linear_forward", xd, Wd, bd)
    assert_unchanged(["x", "W"], [xd, Wd], [x, W])
    scale = np.abs(x).max(initial=0.0) * np.abs(W).max() * d_in + (np.abs(b).max() if bias else 0.0)
    assert_close("y", y_f, y_r, scale=scale)
    assert cache_f.has_bias == cache_r.has_bias == bias
    dy = dev(g.standard_normal(tuple(lead) + (d_out,)))
    # the fast backward (db by BLAS) from the fast cache against the reference's; the
    # size of the terms: dx, dW and db are sums of products of the entries of dy, W and x
    n_rows = max(1, int(np.prod(lead)))
    terms = np.abs(host(dy)).max(initial=0.0) * max(1.0, np.abs(x).max(initial=0.0), np.abs(W).max())
    for name, gf, gr, n in zip(["dx", "dW", "db"], FAST["linear_backward"](dy, cache_f),
                               REFERENCE["linear_backward"](dy, cache_r), [d_out, n_rows, n_rows]):
        if gr is None:
            assert gf is None, f"{name}: the fast kernel gives a gradient the reference does not"
        else:
            assert_close(name, gf, gr, scale=n * terms)
    on_pool = way == "compiled loops" and host(xd) is xd and x.size > 0  # a host array with rows
    assert len(calls) == (2 if on_pool else 0), f"{way}: the compiled loops ran {len(calls)} times"


# ---------------------------------------------------------------------------
