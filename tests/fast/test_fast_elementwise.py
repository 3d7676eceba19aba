"""The fast GELU (minitransformer/fast/elementwise.py): the tanh form equals the reference, the
exact form stays within the bound its module documents."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer.fast.engine import parallel
from minitransformer.fast import elementwise as fast_elementwise
from fast_helpers import (
    assert_close, assert_unchanged, covers, dev, FAST, GELU_DYDX_BOUND, GELU_Y_BOUND, host, REFERENCE,
    run_forward, SETTINGS, small_blocks,
)


# ---------------------------------------------------------------------------
# GELU
# ---------------------------------------------------------------------------
_KNOTS = np.arange(-640, 641) / 64.0  # the fast exact GELU's grid (h = 1/64 on [-10, 10])


@st.composite
def gelu_cases(draw):
    return {
        "shape": tuple(draw(st.lists(st.integers(1, 7), min_size=0, max_size=3))),
        "scale": draw(st.sampled_from([1.0, 3.0, 12.0, 1e4])),
        "specials": draw(st.booleans()),
        "small_blocks": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _gelu_input(c):
    g = np.random.default_rng(c["seed"])
    x = g.standard_normal(c["shape"]) * c["scale"]
    if c["specials"] and x.size:
        specials = np.concatenate([
            [0.0, -0.0, 1e-300, -1e-300, 10.0, -10.0, 10.0 - 2**-40, -10.0 - 2**-40, 1e4, -1e4, 9e3, -9e3, 40.0, -40.0,
             np.inf, -np.inf, np.nan],
            g.choice(_KNOTS, 8), g.choice(_KNOTS, 8) + 2**-45,  # on and just past the grid's knots
        ])
        flat = x.reshape(-1)  # a view
        flat[g.integers(0, flat.size, size=min(flat.size, 6))] = g.choice(specials, min(flat.size, 6))
    return x


def _check_gelu(c, approximate):
    x = _gelu_input(c)
    xd = dev(x)
    with small_blocks(c["small_blocks"]), np.errstate(invalid="ignore"):  # inf * 0 = NaN for x = +-inf, in both
        (y_f, dydx_f), (y_r, dydx_r) = run_forward("gelu_forward", xd, approximate)
    assert_unchanged(["x"], [xd], [x])
    if approximate == "tanh":
        assert_close("y", y_f, y_r)
        assert_close("dy/dx", dydx_f, dydx_r)
    else:
        ax = np.where(np.isfinite(x), np.abs(x), 0.0)
        assert_close("y", y_f, y_r, rtol=0.0, floor=GELU_Y_BOUND * ax + 1e-300)
        assert_close("dy/dx", dydx_f, dydx_r, rtol=0.0, floor=GELU_DYDX_BOUND[0] * ax + GELU_DYDX_BOUND[1])
    dy = dev(np.random.default_rng(c["seed"] + 1).standard_normal(x.shape))
    # the backward is the reference's (dy * cache) in both sets (a blocked one on the
    # thread pool measured slower in a training step: benchmarks/RESULTS.md)
    assert FAST["gelu_backward"] is REFERENCE["gelu_backward"]
    np.testing.assert_array_equal(host(FAST["gelu_backward"](dy, dydx_f)), host(dy) * host(dydx_f))


# x = +-inf and NaN warn "invalid value" (in both sets), also from the pool's threads
IGNORE_INVALID = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")


@covers("gelu_forward")
@IGNORE_INVALID
@SETTINGS
@given(c=gelu_cases(), approximate=st.sampled_from(["none", "tanh"]))
def test_gelu(any_backend, compiled_mode, c, approximate):
    _check_gelu(c, approximate)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_dense_sweep_and_the_blocked_path(compiled_mode, approximate):
    """A dense sweep of [-12, 12] (every cell of the table, both ends of the grid) plus
    far values, large enough (> 2 blocks) that the default blocked, threaded path runs."""
    n = 2 * fast_elementwise._BLOCK + 12345
    x = np.concatenate([np.linspace(-12.0, 12.0, n - 6), [1e4, -1e4, 1e3, -1e3, 30.0, -30.0]])
    saved = parallel.threads()
    parallel.set_threads(2)
    try:
        (y_f, d_f), (y_r, d_r) = run_forward("gelu_forward", dev(x), approximate)
    finally:
        parallel.set_threads(saved)
    if approximate == "tanh":
        assert_close("y", y_f, y_r)
        assert_close("dy/dx", d_f, d_r)
    else:
        assert_close("y", y_f, y_r, rtol=0.0, floor=GELU_Y_BOUND * np.abs(x) + 1e-300)
        assert_close("dy/dx", d_f, d_r, rtol=0.0, floor=GELU_DYDX_BOUND[0] * np.abs(x) + GELU_DYDX_BOUND[1])


# ---------------------------------------------------------------------------
