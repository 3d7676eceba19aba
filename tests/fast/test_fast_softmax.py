"""The fast softmax and cross-entropy (minitransformer/fast/softmax.py) equal the reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from fast_helpers import (
    assert_close, assert_fields_close, assert_unchanged, covers, dev, FAST, host, REFERENCE, RTOL, run_forward,
    SETTINGS,
)

F32_RTOL = 1e-5  # float32 rounding is ~6e-8 an operation; the sums differ in order (float64 in the loop)


# ---------------------------------------------------------------------------
# Softmax
# ---------------------------------------------------------------------------
@st.composite
def softmax_cases(draw):
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    return {
        "shape": shape, "axis": axis,
        "scale": draw(st.sampled_from([1.0, 10.0, 300.0])),
        "neg_inf": draw(st.sampled_from(["none", "some", "rows", "all", "+inf and nan"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _softmax_input(c):
    g = np.random.default_rng(c["seed"])
    x = g.standard_normal(c["shape"]) * c["scale"]
    if c["neg_inf"] == "some":
        x[g.random(x.shape) < 0.3] = -np.inf
    elif c["neg_inf"] == "rows":  # whole rows (along the axis) of -inf
        rows = np.moveaxis(x, c["axis"], -1)  # a view
        rows[g.random(rows.shape[:-1]) < 0.4] = -np.inf
    elif c["neg_inf"] == "all":
        x[...] = -np.inf
    elif c["neg_inf"] == "+inf and nan":  # NaN rows in both sets, in the same places
        x[g.random(x.shape) < 0.1] = np.inf
        x[g.random(x.shape) < 0.1] = np.nan
    return x


def _check_softmax(c):
    x = _softmax_input(c)
    xd = dev(x)
    with np.errstate(invalid="ignore"):  # inf - inf in the "+inf and nan" case
        (p_f, cache_f), (p_r, cache_r) = run_forward("softmax_forward", xd, axis=c["axis"])
    assert_unchanged(["x"], [xd], [x])
    assert_close("p", p_f, p_r)
    assert_fields_close("cache", cache_f, cache_r, ["p", "axis"])
    # the one backward (shared by both sets) gives the same gradient from either cache
    dp = dev(np.random.default_rng(c["seed"] + 1).standard_normal(x.shape))
    with np.errstate(invalid="ignore"):
        dx_f, dx_r = REFERENCE["softmax_backward"](dp, cache_f), REFERENCE["softmax_backward"](dp, cache_r)
    assert_close("dx", dx_f, dx_r, scale=np.abs(host(dp)).max())  # dx = p (dp - sum dp p): terms of the size of dp


@covers("softmax_forward")
@SETTINGS
@given(c=softmax_cases())
def test_softmax_forward(any_backend, c):
    _check_softmax(c)


# ---------------------------------------------------------------------------
# Cross-entropy
# ---------------------------------------------------------------------------
@st.composite
def cross_entropy_cases(draw):
    lead = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    eps = draw(st.sampled_from([0.0, 0.0, 0.1, 0.37]))
    V = draw(st.integers(2 if eps > 0 else 1, 9))
    return {
        "lead": lead, "V": V, "eps": eps,
        "ignore_index": draw(st.sampled_from([None, -100, 0])),
        "ignored": draw(st.sampled_from(["none", "some", "all"])),
        "neg_inf_on_ignored": draw(st.booleans()),  # a -inf logit at an ignored row's class 0
        "reduction": draw(st.sampled_from(["mean", "sum", "none"])),
        "dloss": draw(st.sampled_from(["one", "float", "array"])),
        "scale": draw(st.sampled_from([1.0, 5.0, 50.0])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _check_cross_entropy(c):
    g = np.random.default_rng(c["seed"])
    lead, V, ii = c["lead"], c["V"], c["ignore_index"]
    x = g.standard_normal(lead + (V,)) * c["scale"]
    t = g.integers(0, V, size=lead)
    ignored = np.zeros(lead, dtype=bool)
    if ii is not None and c["ignored"] != "none":
        ignored = g.random(lead) < 0.4 if c["ignored"] == "some" else np.ones(lead, dtype=bool)
        t[ignored] = ii
        if c["neg_inf_on_ignored"]:
            x[ignored, 0] = -np.inf  # ignored rows point at class 0: its loss is inf, unused
    xd, td = dev(x), dev(t)
    kwargs = {"ignore_index": ii, "label_smoothing": c["eps"], "reduction": c["reduction"]}
    with np.errstate(invalid="ignore"):  # -inf - -inf on an ignored row (selected away, in both sets)
        (loss_f, cache_f), (loss_r, cache_r) = run_forward("cross_entropy_forward", xd, td, **kwargs)
    assert_unchanged(["logits", "targets"], [xd, td], [x, t])
    assert_close("loss", loss_f, loss_r)
    assert_fields_close("cache", cache_f, cache_r, ["p", "targets", "weight", "smoothing", "shape"])

    if c["reduction"] == "none":
        dloss = dev(g.standard_normal(lead))
    else:
        dloss = {"one": 1.0, "float": float(g.standard_normal()), "array": dev(g.standard_normal(()))}[c["dloss"]]
    dx_f = FAST["cross_entropy_backward"](dloss, cache_f)
    dx_r = REFERENCE["cross_entropy_backward"](dloss, cache_r)
    scale = np.abs(host(cache_r.weight) * np.abs(host(dloss)).reshape(-1)).max()  # (p - q) w dloss, |p - q| <= 1
    assert_close("dlogits", dx_f, dx_r, scale=scale)
    assert (host(dx_f)[ignored] == 0.0).all(), "ignored rows must get exactly zero gradient"
    assert_close("dlogits (second backward from the same cache)", FAST["cross_entropy_backward"](dloss, cache_f), dx_r,
                 scale=scale)


@covers("cross_entropy_forward", "cross_entropy_backward")
@SETTINGS
@given(c=cross_entropy_cases())
def test_cross_entropy(any_backend, compiled_mode, c):
    _check_cross_entropy(c)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_rows_of_nan_and_infinities(compiled_mode, dtype, eps):
    """A NaN or +inf logit, or a row of -inf, makes the row's loss and p NaN in both sets
    (the reference's arithmetic: inf - inf); a -inf logit elsewhere is probability 0."""
    x = np.random.default_rng(3).standard_normal((6, 5)).astype(dtype)
    x[0, 2] = np.nan
    x[1, 4] = np.inf
    x[2, :] = -np.inf
    x[3, 1] = -np.inf  # the target's: an infinite loss
    x[4, 0] = -np.inf  # another's: p 0
    t = np.array([0, 1, 2, 1, 3, 4])
    with np.errstate(invalid="ignore", divide="ignore"):
        (loss_f, cache_f), (loss_r, cache_r) = run_forward("cross_entropy_forward", dev(x), dev(t),
                                                           label_smoothing=eps, reduction="none")
        d_f = FAST["cross_entropy_backward"](dev(np.ones(6, dtype)), cache_f)
        d_r = REFERENCE["cross_entropy_backward"](dev(np.ones(6, dtype)), cache_r)
    rtol = RTOL if dtype == "float64" else F32_RTOL
    assert_close("loss", loss_f, loss_r, rtol=rtol)
    assert_close("p", cache_f.p, cache_r.p, rtol=rtol)
    assert_close("dlogits", d_f, d_r, rtol=rtol)
    assert np.isnan(host(loss_f)[:3]).all() and host(cache_f.p)[4, 0] == 0.0


def test_cross_entropy_at_the_small_models_shape(compiled_mode):
    """4,096 rows of 112 classes (the benchmarks' small model), float32, with padding and
    label smoothing: many rows per thread (the hypothesis cases have at most 125 rows).
    The serial build is held to the threaded one in tests/fast/test_compiled.py."""
    g = np.random.default_rng(4)
    x = (g.standard_normal((64, 64, 112)) * 3).astype(np.float32)
    t = g.integers(0, 112, size=(64, 64))
    t[:, -5:] = 0  # padding
    (loss_f, cache_f), (loss_r, cache_r) = run_forward("cross_entropy_forward", x, t, ignore_index=0,
                                                       label_smoothing=0.1)
    assert_close("loss", loss_f, loss_r, rtol=F32_RTOL)
    assert_close("p", cache_f.p, cache_r.p, rtol=F32_RTOL)
    assert_close("weight", cache_f.weight, cache_r.weight, rtol=F32_RTOL)
    assert_close("dlogits", FAST["cross_entropy_backward"](np.float32(1.0), cache_f),
                 REFERENCE["cross_entropy_backward"](np.float32(1.0), cache_r), rtol=F32_RTOL)


# ---------------------------------------------------------------------------
