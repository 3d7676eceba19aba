"""The fast layer norm (minitransformer/fast/layernorm.py) equals the reference."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from fast_helpers import (
    assert_close, assert_fields_close, assert_unchanged, covers, dev, FAST, host, REFERENCE, run_forward,
    SETTINGS,
)


# ---------------------------------------------------------------------------
# Layer norm
# ---------------------------------------------------------------------------
@st.composite
def layernorm_cases(draw):
    return {
        "lead": tuple(draw(st.lists(st.integers(1, 5), min_size=0, max_size=3))),
        "D": draw(st.integers(1, 9)),
        "eps": draw(st.sampled_from([1e-5, 1e-12, 0.5])),
        "offset": draw(st.sampled_from([0.0, 3.0, -20.0])),
        "scale": draw(st.sampled_from([1.0, 1e-3, 1e3])),
        "constant_rows": draw(st.booleans()),  # variance 0: xhat is 0 up to the rounding of the mean
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _check_layernorm(c):
    g = np.random.default_rng(c["seed"])
    shape = c["lead"] + (c["D"],)
    x = g.standard_normal(shape) * c["scale"] + c["offset"] * c["scale"]
    if c["constant_rows"]:
        rows = x.reshape(-1, c["D"])  # a view
        rows[g.random(rows.shape[0]) < 0.5] = g.standard_normal() * c["scale"] + 0.1
    w, b, dy = g.standard_normal(c["D"]), g.standard_normal(c["D"]), g.standard_normal(shape)
    xd, wd, bd = dev(x), dev(w), dev(b)
    (y_f, cache_f), (y_r, cache_r) = run_forward("layernorm_forward", xd, wd, bd, eps=c["eps"])
    assert_unchanged(["x", "w", "b"], [xd, wd, bd], [x, w, b])
    # xhat = (x - mu) rstd is the difference of terms of size |x| (0 up to the mean's rounding
    # on a constant row), times rstd
    xhat_scale = np.abs(x).max() * host(cache_r.rstd).max()
    assert_close("cache.xhat", cache_f.xhat, cache_r.xhat, scale=xhat_scale)
    assert_close("y", y_f, y_r, scale=xhat_scale * np.abs(w).max() + np.abs(b).max())
    assert_fields_close("cache", cache_f, cache_r, ["rstd", "w"])
    dyd = dev(dy)
    grads_f = FAST["layernorm_backward"](dyd, cache_f)
    grads_r = REFERENCE["layernorm_backward"](dyd, cache_r)
    again = FAST["layernorm_backward"](dyd, cache_f)
    assert_unchanged(["dy"], [dyd], [dy])
    # the size of the terms: dx = rstd (g - mean g - xhat mean(g xhat)), g = dy w;
    # dw = sum of dy xhat; db = sum of dy
    g_max, xhat_max = np.abs(dy).max() * np.abs(w).max(), max(np.abs(host(cache_r.xhat)).max(), xhat_scale)
    scales = [host(cache_r.rstd).max() * g_max * (1.0 + xhat_max ** 2), np.abs(dy).max() * xhat_max, np.abs(dy).max()]
    for name, gf, gr, g2, scale in zip(["dx", "dw", "db"], grads_f, grads_r, again, scales):
        assert_close(name, gf, gr, scale=scale)
        assert_close(f"{name} (second backward from the same cache)", g2, gr, scale=scale)


@covers("layernorm_forward", "layernorm_backward")
@SETTINGS
@given(c=layernorm_cases())
def test_layernorm(any_backend, compiled_mode, c):
    _check_layernorm(c)


# ---------------------------------------------------------------------------
