"""The fast attention (minitransformer/fast/attention.py) equals the reference, masks, bias,
dropout and cut-up work included; its merge_heads too."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from minitransformer.fast.engine import compiled, parallel
from minitransformer.fast import attention as fast_attention
from minitransformer.fast import decode_attention, fused_attention
from minitransformer.nn.attention import causal_mask, combine_masks
from fast_helpers import (
    assert_close, assert_fields_close, assert_unchanged, covers, dev, FAST, host, REFERENCE, run_forward,
    SETTINGS, small_blocks,
)


@pytest.fixture(autouse=True)
def numpy_products():
    """This file tests the twin's own products; the loop that calls BLAS itself, which the
    twin hands its work to where there is one pool of threads, has test_fast_fused_attention.py."""
    fused_attention.set_enabled(False)
    yield
    fused_attention.set_enabled(None)


# ---------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------
MASK_KINDS = ("none", "causal", "padding", "causal+padding", "random", "random (Tq, Tk)", "random (B, 1, Tq, Tk)")
BIAS_SHAPES = ("none", "(1, H, Tq, Tk)", "(H, Tq, Tk)", "(B, H, Tq, Tk)", "(Tq, Tk)", "(B, 1, 1, Tk)")


@st.composite
def attention_cases(draw):
    mask = draw(st.sampled_from(MASK_KINDS))
    Tq = draw(st.integers(1, 5))
    Tk = Tq + draw(st.integers(0, 3)) if "causal" in mask else draw(st.integers(1, 6))
    return {
        "B": draw(st.integers(1, 4)), "H": draw(st.integers(1, 3)), "Tq": Tq, "Tk": Tk,
        "Dh": draw(st.integers(1, 4)), "Dv": draw(st.integers(1, 4)),
        "mask": mask,
        "fully_masked_rows": draw(st.booleans()),
        "bias": draw(st.sampled_from(BIAS_SHAPES)),
        "bias_neg_inf": draw(st.booleans()),  # an additive mask: -inf entries, whole rows of them
        "dropout": draw(st.sampled_from([None, 0.1, 0.5])),
        "scale": draw(st.sampled_from([None, 0.3, 2.0])),
        "magnitude": draw(st.sampled_from([1.0, 4.0])),
        "small_blocks": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _attention_inputs(c):
    g = np.random.default_rng(c["seed"])
    B, H, Tq, Tk, Dh, Dv = c["B"], c["H"], c["Tq"], c["Tk"], c["Dh"], c["Dv"]
    m = c["magnitude"]
    q, k = g.standard_normal((B, H, Tq, Dh)) * m, g.standard_normal((B, H, Tk, Dh)) * m
    v, dout = g.standard_normal((B, H, Tk, Dv)), g.standard_normal((B, H, Tq, Dv))

    def padding():  # (B, 1, 1, Tk); a length of 0 pads the whole sequence: every row masked
        lengths = g.integers(0 if c["fully_masked_rows"] else 1, Tk + 1, size=B)
        return (np.arange(Tk)[None, :] < lengths[:, None])[:, None, None, :]

    kind = c["mask"]
    mask = None
    if kind == "causal":
        mask = host(causal_mask(Tq, Tk))
    elif kind == "padding":
        mask = padding()
    elif kind == "causal+padding":
        mask = host(combine_masks(causal_mask(Tq, Tk), dev(padding())))
    elif kind.startswith("random"):
        shape = {"random": (B, H, Tq, Tk), "random (Tq, Tk)": (Tq, Tk), "random (B, 1, Tq, Tk)": (B, 1, Tq, Tk)}[kind]
        mask = g.random(shape) < 0.6
        if c["fully_masked_rows"]:
            mask[g.random(shape[:-1]) < 0.3] = False  # queries that may attend to nothing
    bias = None
    if c["bias"] != "none":
        shape = {"(1, H, Tq, Tk)": (1, H, Tq, Tk), "(H, Tq, Tk)": (H, Tq, Tk), "(B, H, Tq, Tk)": (B, H, Tq, Tk),
                 "(Tq, Tk)": (Tq, Tk), "(B, 1, 1, Tk)": (B, 1, 1, Tk)}[c["bias"]]
        bias = g.standard_normal(shape) * 2.0
        if c["bias_neg_inf"]:  # -inf masks a key as the boolean mask does; a row of -inf, every key
            bias[g.random(shape) < 0.2] = -np.inf
            bias[g.random(shape[:-1]) < 0.3] = -np.inf
    drop = None
    if c["dropout"] is not None:
        drop = (g.random((B, H, Tq, Tk)) >= c["dropout"]) / (1.0 - c["dropout"])
    return q, k, v, mask, bias, drop, dout


def _pd_max(drop):
    """The largest probability after dropout: 1, or 1/(1 - p) with a dropout mask."""
    return 1.0 if drop is None else float(drop.max())


def _check_attention(c):
    q, k, v, mask, bias, drop, dout = _attention_inputs(c)
    on_host = [q, k, v, mask, bias, drop]
    on_dev = [None if a is None else dev(a) for a in on_host]
    qd, kd, vd, maskd, biasd, dropd = on_dev
    with small_blocks(c["small_blocks"]):
        (out_f, cache_f), (out_r, cache_r) = run_forward(
            "attention_forward", qd, kd, vd, mask=maskd, scale=c["scale"], dropout_mask=dropd, bias=biasd)
        assert_unchanged(["q", "k", "v", "mask", "bias", "dropout_mask"], on_dev, on_host)
        assert_close("out", out_f, out_r, scale=np.abs(v).max() * _pd_max(drop))
        assert_fields_close("cache", cache_f, cache_r, ["p", "pd", "dropout_mask", "scale"])
        do = dev(dout)
        grads_f = FAST["attention_backward"](do, cache_f)
        grads_r = REFERENCE["attention_backward"](do, cache_r)
        again = FAST["attention_backward"](do, cache_f)
    assert_unchanged(["dout"], [do], [dout])
    # the size of the terms each gradient is summed from: dP = dO V^T, dS = P (dP - delta),
    # dQ = s dS K, dK = s dS^T Q, dV = Pd^T dO, dA = dS
    s = cache_r.scale
    dp = np.abs(dout).max() * np.abs(v).max() * (1.0 if drop is None else drop.max())
    scales = [s * dp * np.abs(k).max(), s * dp * np.abs(q).max(), np.abs(dout).max() * _pd_max(drop), dp]
    for name, gf, gr, g2, scale in zip(["dq", "dk", "dv", "dbias"], grads_f, grads_r, again, scales):
        assert_close(name, gf, gr, scale=scale)
        assert_close(f"{name} (second backward from the same cache)", g2, gr, scale=scale)
    allowed = np.ones(cache_r.p.shape, dtype=bool)
    if mask is not None:
        allowed &= mask
    if bias is not None:
        allowed &= bias > -np.inf
    if not allowed.all():  # a query that may attend to nothing outputs 0 and passes back 0
        empty = ~allowed.any(axis=-1)
        assert (host(out_f)[empty] == 0.0).all() and (host(grads_f[0])[empty] == 0.0).all()


@covers("attention_forward", "attention_backward")
@SETTINGS
@given(c=attention_cases())
def test_attention(any_backend, c):
    _check_attention(c)


@SETTINGS
@given(c=attention_cases())
def test_float32_attention_takes_the_one_pass_softmax_and_equals_the_reference(compiled_mode, c):
    """float32 logits go through the compiled masked softmax (one loop a row: mask, max,
    exponential, sum, scale; with Numba) or NumPy's passes (without): either way within
    float32's rounding of the float64 reference, masked keys exactly 0, a row that may see
    no key all zeros, in pieces on two threads too."""
    q, k, v, mask, bias, drop, dout = _attention_inputs(c)
    f32 = [None if a is None or a.dtype == bool else a.astype(np.float32) for a in (q, k, v, bias, drop, dout)]
    q32, k32, v32, bias32, drop32, dout32 = f32
    softmax = compiled.masked_softmax_float32
    calls = []
    serial = getattr(softmax, "serial", None)  # (without Numba: a plain function, never called)
    if serial is not None:
        softmax.serial = lambda *a: (calls.append(1), serial(*a))[1]  # noqa: E731 (counted, then run)
    try:
        with small_blocks(c["small_blocks"]):
            out, cache = fast_attention.attention_forward(q32, k32, v32, mask=mask, scale=c["scale"],
                                                          dropout_mask=drop32, bias=bias32)
            grads = fast_attention.attention_backward(dout32, cache)
    finally:
        if serial is not None:
            softmax.serial = serial
    decoding = decode_attention.usable(q32, k32, v32, mask, bias32, drop32)  # one query a row: its own loop
    # with key blocks skipped, a mask that lets no row see any key leaves no logits to take the softmax of
    sees_a_key = cache.blocks is None or any(k_end > 0 for _, _, k_end in cache.blocks)
    assert bool(calls) == (compiled_mode and compiled.AVAILABLE and not decoding and sees_a_key), \
        "the one-pass softmax ran or not"
    out_r, cache_r = REFERENCE["attention_forward"](q, k, v, mask=mask, scale=c["scale"], dropout_mask=drop,
                                                    bias=bias)
    grads_r = REFERENCE["attention_backward"](dout, cache_r)
    assert out.dtype == cache.p.dtype == np.float32
    # float32 logits of up to 4 x 4 x 4 (x 2 with the scale), rounded: their exponentials move by that
    logit = max(np.abs(q).max() * np.abs(k).max() * q.shape[-1] * (cache_r.scale or 1.0), 1.0)
    rtol = 2e-6 * logit
    assert_close("p", cache.p.astype(np.float64), cache_r.p, rtol=rtol, floor=rtol)
    assert_close("out", out.astype(np.float64), out_r, rtol=rtol, floor=rtol * np.abs(v).max() * _pd_max(drop))
    if mask is not None:
        blocked = ~np.broadcast_to(mask, cache_r.p.shape)
        assert (cache.p[blocked] == 0.0).all(), "p: a masked key got a probability other than exactly 0"
    s = cache_r.scale
    dp = np.abs(dout).max() * np.abs(v).max() * _pd_max(drop)
    scales = [s * dp * np.abs(k).max(), s * dp * np.abs(q).max(), np.abs(dout).max() * _pd_max(drop)]
    for name, g, g_r, scale in zip(["dq", "dk", "dv"], grads, grads_r, scales):
        assert g.dtype == np.float32, name
        assert_close(name, g.astype(np.float64), g_r, rtol=10 * rtol, floor=10 * rtol * max(scale, 1.0) * Tk_of(k))


def Tk_of(k) -> int:
    """The number of keys: a gradient sums that many float32 terms."""
    return k.shape[2]


def test_float32_softmax_of_a_row_that_sees_only_nan_is_nan(compiled_mode):
    """The first row of a causal mask sees one key: a NaN query makes that row NaN, not zeros
    (the compiled loop's max skips NaN, so the row is checked for it)."""
    g = np.random.default_rng(4)
    q, k, v = (g.standard_normal(s).astype(np.float32) for s in [(1, 2, 3, 2), (1, 2, 3, 2), (1, 2, 3, 2)])
    q[0, 0, 0] = np.nan
    out, cache = fast_attention.attention_forward(q, k, v, mask=causal_mask(3))
    assert np.isnan(cache.p[0, 0, 0]).all() and np.isnan(out[0, 0, 0]).all()
    assert np.isfinite(cache.p[0, 1]).all() and np.isfinite(cache.p[0, 0, 1:]).all()


def test_float32_softmax_of_a_row_with_nan_is_nan_and_of_minus_inf_is_zeros(compiled_mode):
    """Bad logits in the one-pass softmax: a NaN or +inf among the keys a row may see makes
    that row NaN (as the reference's exponentials do); a row whose seen logits are all -inf is
    zeros; the other rows are untouched."""
    g = np.random.default_rng(3)
    q, k, v = (g.standard_normal(s).astype(np.float32) for s in [(1, 1, 4, 2), (1, 1, 5, 2), (1, 1, 5, 3)])
    bias = np.zeros((1, 1, 4, 5), dtype=np.float32)
    bias[0, 0, 0, 2] = np.nan
    bias[0, 0, 1, 4] = np.inf
    bias[0, 0, 2, :] = -np.inf
    mask = np.ones((4, 5), dtype=bool)
    mask[3, 1] = False
    out, cache = fast_attention.attention_forward(q, k, v, mask=mask, bias=bias)
    assert np.isnan(cache.p[0, 0, 0]).all() and np.isnan(cache.p[0, 0, 1]).all()
    assert (cache.p[0, 0, 2] == 0.0).all() and (out[0, 0, 2] == 0.0).all()
    assert cache.p[0, 0, 3, 1] == 0.0 and abs(cache.p[0, 0, 3].sum() - 1.0) < 1e-6


@pytest.mark.parametrize("bias_shape", [(2, 2, 3, 4), (2, 3, 4), (2, 1, 1, 4)])
def test_attention_bias_of_minus_inf_masks_whole_rows_without_a_mask(any_backend, bias_shape):
    """A bias of -inf is an additive mask; a query whose keys all get -inf outputs zeros
    (not NaN) and passes back zeros, in both sets, also when no boolean mask is given."""
    g = np.random.default_rng(11)
    q, k, v, dout = (g.standard_normal(s) for s in [(2, 2, 3, 2), (2, 2, 4, 2), (2, 2, 4, 3), (2, 2, 3, 3)])
    bias = g.standard_normal(bias_shape)
    bias[..., 0, :] = -np.inf  # the first query of every head (or, for (B, 1, 1, Tk), every query)
    bias[..., -1, 1] = -np.inf
    args = [dev(a) for a in (q, k, v)]
    (out_f, cache_f), (out_r, cache_r) = run_forward("attention_forward", *args, bias=dev(bias))
    assert not np.isnan(host(out_r)).any()
    assert_close("out", out_f, out_r, scale=np.abs(v).max())
    assert_close("p", cache_f.p, cache_r.p)
    for name, gf, gr in zip(["dq", "dk", "dv", "dbias"], FAST["attention_backward"](dev(dout), cache_f),
                            REFERENCE["attention_backward"](dev(dout), cache_r)):
        assert_close(name, gf, gr, scale=10.0)


@pytest.mark.parametrize("dropout", [False, True])
def test_attention_skips_masked_key_blocks_at_default_sizes(dropout):
    """T = 300 under a causal mask with padding: the query axis is cut into blocks that
    see only their key prefix (the default sizes), the skipped probabilities are
    exactly 0, and everything equals the reference, forward and backward."""
    B, H, T, D = 2, 2, 300, 4
    g = np.random.default_rng(3)
    q, k, v, dout = (g.standard_normal((B, H, T, D)) for _ in range(4))
    mask = np.broadcast_to(causal_mask(T), (B, 1, T, T)).copy()
    mask[1, :, :, 250:] = False  # padding of the second sequence
    mask[0, :, :40, :] = False  # and queries that see nothing
    drop = (g.random((B, H, T, T)) >= 0.1) / 0.9 if dropout else None
    (out_f, cache_f), (out_r, cache_r) = run_forward("attention_forward", q, k, v, mask=mask, dropout_mask=drop)
    rows = fast_attention.query_block_rows(T)
    assert len(cache_f.blocks) == -(-T // rows) > 1 and cache_f.blocks[0] == (0, rows, rows)
    for q0, q1, k_end in cache_f.blocks:
        assert (cache_f.p[:, :, q0:q1, k_end:] == 0.0).all() and (cache_f.pd[:, :, q0:q1, k_end:] == 0.0).all()
    assert_close("out", out_f, out_r, scale=np.abs(v).max() * _pd_max(drop))
    assert_fields_close("cache", cache_f, cache_r, ["p", "pd"])
    dp = np.abs(dout).max() * np.abs(v).max() * _pd_max(drop)
    scales = [dp * np.abs(k).max(), dp * np.abs(q).max(), np.abs(dout).max() * _pd_max(drop)]
    grads_f = FAST["attention_backward"](dout, cache_f)
    grads_r = REFERENCE["attention_backward"](dout, cache_r)
    for name, gf, gr, scale in zip(["dq", "dk", "dv"], grads_f, grads_r, scales):
        assert_close(name, gf, gr, scale=scale)
    assert (out_f[0, :, :40] == 0.0).all() and (grads_f[0][0, :, :40] == 0.0).all()


def test_attention_many_pieces_default_blocks():
    """A batch large enough to be cut into several pieces with the default block size
    (two threads), with a per-sequence bias, a shared bias and padding."""
    B, H, T, D = 12, 2, 64, 8  # 12 * 2 * 64 * 64 * 8 bytes = 768 KiB of scores: more than one 512 KiB block
    g = np.random.default_rng(7)
    saved = parallel.threads()
    parallel.set_threads(2)
    try:
        assert len(parallel.batch_slices(B, H * T * T * 8)) > 1
        for bias_shape in [(B, H, T, T), (B, 1, 1, T), (1, H, T, T), (H, T, T)]:
            q, k, v, dout = (g.standard_normal((B, H, T, D)) for _ in range(4))
            lengths = g.integers(1, T + 1, size=B)
            mask = combine_masks(causal_mask(T), dev((np.arange(T) < lengths[:, None])[:, None, None, :]))
            bias = dev(g.standard_normal(bias_shape))
            args = [dev(a) for a in (q, k, v)]
            (out_f, cache_f), (out_r, cache_r) = run_forward("attention_forward", *args, mask=mask, bias=bias)
            assert_close("out", out_f, out_r)
            assert_close("p", cache_f.p, cache_r.p)
            for name, gf, gr in zip(["dq", "dk", "dv", "dbias"], FAST["attention_backward"](dev(dout), cache_f),
                                    REFERENCE["attention_backward"](dev(dout), cache_r)):
                assert_close(f"{name} (bias {bias_shape})", gf, gr)
    finally:
        parallel.set_threads(saved)


# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# merge_heads
# ---------------------------------------------------------------------------
@covers("merge_heads")
@SETTINGS
@given(B=st.integers(0, 3), H=st.integers(1, 4), T=st.integers(1, 6), d=st.integers(1, 5),
       order=st.permutations([0, 1, 2]), n=st.integers(1, 3), seed=st.integers(0, 2**32 - 1))
def test_merge_heads(any_backend, B, H, T, d, order, n, seed):
    """Equal to the reference for plain arrays, for the views of one buffer that the fast
    attention backward returns (free then: a view of the buffer), and for those views in
    another order or a subset (a copy, like the reference)."""
    g = np.random.default_rng(seed)
    q, k, v, do = (dev(g.standard_normal((B, H, T, d))) for _ in range(4))
    _, cache = FAST["attention_forward"](q, k, v)
    views = FAST["attention_backward"](do, cache)[:3]  # (B, H, T, d) each, one token-major buffer
    plain = [dev(host(a)) for a in views]  # the same values in arrays of their own
    for parts in (views, [views[i] for i in order][:n], plain[:n]):
        assert_close("merged", FAST["merge_heads"](*parts), REFERENCE["merge_heads"](*parts), scale=1.0)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kernel_set", ["reference", "fast"])
def test_a_wrong_upstream_gradient_is_refused(kernel_set):
    """Both sets refuse a dout that is not the output's shape, with the same message
    ((2, 2, 1, 4) would broadcast silently in the products)."""
    g = np.random.default_rng(1)
    q, k, v = (g.standard_normal((2, 2, 3, 4)) for _ in range(3))
    kernels = REFERENCE if kernel_set == "reference" else FAST
    _, cache = kernels["attention_forward"](q, k, v)
    for shape in ((2, 2, 2, 4), (2, 2, 1, 4)):
        with pytest.raises(ValueError, match=rf"dout has shape \({', '.join(map(str, shape))}\), the output "
                                             r"\(2, 2, 3, 4\)"):
            kernels["attention_backward"](np.zeros(shape), cache)
