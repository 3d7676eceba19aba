"""The compiled attention (minitransformer/fast/compiled_attention.py) equals the reference in
float32: odd shapes (T = 1, d = 1, B*H not a multiple of the threads), strided and transposed
inputs, every kind of mask, rows with no key to see; its exponential within its documented bound."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer.fast import attention as fast_attention
from minitransformer.fast import compiled, compiled_attention
from minitransformer.nn import attention as reference
from fast_helpers import SETTINGS, assert_close

pytestmark = pytest.mark.skipif(not compiled.AVAILABLE, reason="Numba is not installed")

EXP_BOUND = 1.1e-8  # the documented relative error of _exp_row (Taylor remainder e^|r| |r|^8 / 8! / e^r)


def test_the_exponential_within_its_bound():
    x = -np.concatenate([np.linspace(0, 708, 400_001), np.abs(np.random.default_rng(0).standard_normal(10_000))])
    e = compiled_attention.exp_nonpositive(x)
    rel = np.abs(e / np.exp(x) - 1.0)
    assert rel.max() <= EXP_BOUND, f"exp: largest relative error {rel.max():.3g} at x = {x[rel.argmax()]}"
    assert compiled_attention.exp_nonpositive(np.array([0.0]))[0] == 1.0
    far = compiled_attention.exp_nonpositive(np.array([-709.0, -1e4, -np.inf]))
    assert np.all(far <= 3.4e-308) and np.all(far.astype(np.float32) == 0.0), "underflow rounds to 0 in float32"


@pytest.fixture
def compiled_everywhere():
    saved = compiled.enabled(), compiled.MIN_SIZE
    compiled.set_enabled(True)
    compiled.MIN_SIZE = 0  # small inputs take the threaded build too (and MIN_SIZE = 1 << 40, the serial one)
    try:
        yield
    finally:
        compiled.set_enabled(saved[0])
        compiled.MIN_SIZE = saved[1]


MASKS = ("none", "causal", "padding", "random (B, H, Tq, Tk)", "random (Tq, Tk)", "empty rows")


@st.composite
def cases(draw):
    mask = draw(st.sampled_from(MASKS))
    Tq = draw(st.integers(1, 9))
    return {"B": draw(st.integers(1, 5)), "H": draw(st.integers(1, 3)), "Tq": Tq,
            "Tk": Tq if mask == "causal" else draw(st.integers(1, 9)), "Dh": draw(st.integers(1, 5)),
            "Dv": draw(st.integers(1, 5)), "mask": mask, "layout": draw(st.sampled_from(["fused", "plain", "reversed"])),
            "serial": draw(st.booleans()), "seed": draw(st.integers(0, 2**32 - 1))}


def _inputs(c):
    g = np.random.default_rng(c["seed"])
    B, H, Tq, Tk, Dh, Dv = c["B"], c["H"], c["Tq"], c["Tk"], c["Dh"], c["Dv"]
    if c["layout"] == "fused" and Tq == Tk and Dh == Dv:  # views of one (B, T, 3, H, d) projection, as in a model
        qkv = g.standard_normal((B, Tq, 3, H, Dh)).astype(np.float32) * 2
        q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    else:
        q = g.standard_normal((B, H, Tq, Dh)).astype(np.float32) * 2
        k = g.standard_normal((B, H, Tk, Dh)).astype(np.float32) * 2
        v = g.standard_normal((B, H, Tk, Dv)).astype(np.float32)
        if c["layout"] == "reversed":  # negative strides, nothing contiguous
            q, k, v = q[::-1, :, ::-1], k[:, ::-1, ::-1], v[::-1, ::-1]
    mask = None
    kind = c["mask"]
    if kind == "causal":
        mask = reference.causal_mask(Tq, Tk)
    elif kind == "padding":
        lengths = g.integers(1, Tk + 1, size=B)
        mask = (np.arange(Tk)[None, :] < lengths[:, None])[:, None, None, :]
    elif kind.startswith("random"):
        mask = g.random((B, H, Tq, Tk) if "B, H" in kind else (Tq, Tk)) < 0.6
    elif kind == "empty rows":  # some queries may attend to nothing: zeros out, zeros back
        mask = g.random((B, H, Tq, Tk)) < 0.5
        mask[g.random((B, H, Tq)) < 0.4] = False
    dout = g.standard_normal((B, H, Tq, Dv)).astype(np.float32)
    return q, k, v, mask, dout


@SETTINGS
@given(c=cases())
def test_compiled_attention_equals_the_reference(compiled_everywhere, c):
    q, k, v, mask, dout = _inputs(c)
    copies = [a.copy() for a in (q, k, v, dout)]
    if c["serial"]:
        compiled.MIN_SIZE = 1 << 40
    assert compiled_attention.usable(q, k, v, mask, None, None)
    out, cache = fast_attention.attention_forward(q, k, v, mask=mask)
    assert cache.blocks is None and cache.pd is cache.p, "the compiled forward ran"
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    ref_out, ref_cache = reference.attention_forward(q64, k64, v64, mask=mask)
    assert out.dtype == np.float32 and cache.p.dtype == np.float32
    assert_close("out", out.astype(np.float64), ref_out, rtol=1e-5, scale=np.abs(v64).max())
    assert_close("p", cache.p.astype(np.float64), ref_cache.p, rtol=1e-5, scale=1.0)
    if mask is not None:  # masked keys get exactly 0, rows with no key exactly 0 out
        allowed = np.broadcast_to(mask, cache.p.shape)
        assert (cache.p[~allowed] == 0.0).all()
        empty = ~allowed.any(axis=-1)
        assert (out[empty] == 0.0).all()
    grads = fast_attention.attention_backward(dout, cache)
    ref_grads = reference.attention_backward(dout.astype(np.float64), ref_cache)
    s = ref_cache.scale
    dp = np.abs(dout).max() * np.abs(v64).max()
    for name, gf, gr, scale in zip(["dq", "dk", "dv"], grads, ref_grads,
                                   [s * dp * np.abs(k64).max(), s * dp * np.abs(q64).max(), np.abs(dout).max()]):
        assert gf.dtype == np.float32
        assert_close(name, gf.astype(np.float64), gr, rtol=2e-5, scale=scale * max(1, c["Tk"]))
    assert grads[3] is None
    for name, a, b in zip(["q", "k", "v", "dout"], (q, k, v, dout), copies):
        assert np.array_equal(a, b), f"{name} was written to"


def test_what_the_compiled_attention_does_not_take():
    g = np.random.default_rng(0)
    q, k, v = (g.standard_normal((2, 2, 3, 4)).astype(np.float32) for _ in range(3))
    assert not compiled_attention.usable(q.astype(np.float64), k, v, None, None, None), "float64: the NumPy path"
    assert not compiled_attention.usable(q, k, v, None, np.zeros((3, 3), np.float32), None), "a bias"
    assert not compiled_attention.usable(q, k, v, None, None, np.ones((2, 2, 3, 3), np.float32)), "dropout"
    assert not compiled_attention.usable(q, k[:, :, :0], v[:, :, :0], None, None, None), "no key at all"


def test_a_wrong_upstream_gradient_is_refused_not_read_out_of_bounds(compiled_everywhere):
    g = np.random.default_rng(1)
    q, k, v = (g.standard_normal((2, 2, 3, 4)).astype(np.float32) for _ in range(3))
    _, cache = fast_attention.attention_forward(q, k, v)
    with pytest.raises(ValueError, match="dout"):
        fast_attention.attention_backward(np.zeros((2, 2, 2, 4), np.float32), cache)
