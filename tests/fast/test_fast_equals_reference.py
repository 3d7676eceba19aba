"""Every fast kernel equals its reference kernel.

For each name in :data:`minitransformer.fast.FAST_KERNELS` a test below draws
random shapes and options with hypothesis, runs the reference kernel
(``minitransformer.kernels.table("reference")``) and the fast one
(``kernels.table("fast")``) on the same float64 inputs, and
compares every output, every gradient and the cache fields that later code reads
(attention's probabilities ``p`` and ``pd``, the cross-entropy's ``p`` and row
weights, layer norm's ``xhat`` and ``rstd``, GELU's dy/dx).

The tolerance is 1e-12 relative, entry by entry, with a floor for entries near 0
of 1e-12 times the larger of the tensor's largest entry and the size of the
terms it is computed from (see :func:`assert_close`). The fast exact GELU is an
intended approximation and is held to the bound its module docstring documents
instead; its tanh form is held to 1e-12.

Every hypothesis test runs on the numpy backend and on the strict stand-in for
CuPy (the ``any_backend`` fixture).

Beside the values: the fast kernels keep float32 inputs float32, raise the
reference's ValueError (same message) for bad input, leave their inputs
untouched, and allow a second backward from the same cache. The attention and
GELU kernels also run with cache blocks shrunk to a few bytes and two threads,
so that the code that cuts the work into pieces (and adds up the bias gradient
of the pieces) is exercised on these small shapes too.

``test_every_fast_kernel_has_an_equality_test`` fails when a name in
``FAST_KERNELS`` has no equality test here or in another file of ``tests/fast``.
"""
from __future__ import annotations

import contextlib
import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend, kernels
from minitransformer.fast import FAST_KERNELS, compiled, parallel
from minitransformer.fast import activations as fast_activations
from minitransformer.fast import attention as fast_attention
from minitransformer.nn.attention import causal_mask, combine_masks

RTOL = 1e-12  # float64 rounding is ~1e-16: four orders of magnitude to spare

# The documented bound of the fast exact GELU (minitransformer/fast/activations.py):
# |Phi~ - Phi| < 1e-10 and |Phi~' - phi| < 2e-8, hence
# |y~ - y| <= 1e-10 |x| and |dy~/dx - dy/dx| <= 2e-8 |x| + 1e-10.
GELU_Y_BOUND = 1e-10
GELU_DYDX_BOUND = (2e-8, 1e-10)

REFERENCE = kernels.table("reference")
FAST = kernels.table("fast")

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Kernel names whose equality with the reference is tested in another file of
# tests/fast (the coverage test below finds that file by the name).
TESTED_ELSEWHERE = ("adam_update",)

COVERED: set[str] = set()  # filled by @covers at import time


def covers(*names):
    """Mark a test as the equality test of the kernels ``names``."""
    def mark(fn):
        COVERED.update(names)
        return fn
    return mark


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------
def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return np.asarray(backend.to_numpy(a))


def assert_close(name, fast, ref, rtol=RTOL, floor=None, scale=0.0):
    """Assert that the fast kernel's ``fast`` equals the reference's ``ref``.

    Arrays: same shape and dtype, NaN and infinities in the same places (and
    of the same sign), and every finite entry within ``rtol * |ref| + floor``.
    ``floor`` (for entries near 0) defaults to ``rtol * max(largest |ref|, scale)``:
    an entry that is the small difference of larger terms (a gradient summed
    over rows, a centred input, dS = P(dP - delta)) carries the rounding of those
    terms, not a rounding of its own size; ``scale`` is the size of those terms
    where the tensor itself may be ~0 (attention's dQ with one key is exactly 0
    in the reference, rounding-small in the fast kernel). On failure the message
    names the tensor, the largest error, its index and both values.

    ``None``, numbers, strings and tuples must be equal.
    """
    if ref is None or (isinstance(ref, (int, float, str, tuple)) and not isinstance(ref, np.generic)):
        assert fast == ref, f"{name}: fast {fast!r} != reference {ref!r}"
        return
    a, b = _host(fast), _host(ref)
    assert a.shape == b.shape, f"{name}: shape {a.shape} != reference shape {b.shape}"
    assert a.dtype == b.dtype, f"{name}: dtype {a.dtype} != reference dtype {b.dtype}"
    if a.dtype.kind not in "fc":
        bad = a != b
        if bad.any():
            idx = tuple(int(i) for i in np.argwhere(bad)[0])
            raise AssertionError(f"{name}: {int(bad.sum())} entries differ; first at {idx}: "
                                 f"fast {a[idx]!r}, reference {b[idx]!r}")
        return
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if (nan_a != nan_b).any():
        idx = tuple(int(i) for i in np.argwhere(nan_a != nan_b)[0])
        raise AssertionError(f"{name}: NaN in one set only, at {idx}: fast {a[idx]!r}, reference {b[idx]!r}")
    inf_a, inf_b = np.isinf(a), np.isinf(b)
    if (inf_a != inf_b).any() or (a[inf_a] != b[inf_b]).any():
        idx = tuple(int(i) for i in np.argwhere((inf_a | inf_b) & (a != b))[0])
        raise AssertionError(f"{name}: infinities differ at {idx}: fast {a[idx]!r}, reference {b[idx]!r}")
    finite = np.isfinite(b)
    if not finite.any():
        return
    if floor is None:
        floor = rtol * max(float(np.abs(b[finite]).max()), float(scale))
    err = np.abs(np.where(finite, a, 0.0) - np.where(finite, b, 0.0))
    allowed = rtol * np.abs(np.where(finite, b, 0.0)) + floor
    excess = err - allowed
    if (excess > 0).any():
        idx = np.unravel_index(int(np.argmax(excess)), a.shape)
        worst = np.unravel_index(int(np.argmax(err)), a.shape)
        raise AssertionError(
            f"{name}: {int((excess > 0).sum())} of {a.size} entries differ by more than "
            f"{rtol:g} * |reference| + {floor:.3g}; the worst at {tuple(map(int, idx))}: "
            f"fast {a[idx]!r}, reference {b[idx]!r}, error {err[idx]:.3g} (allowed {allowed[idx]:.3g}); "
            f"largest error {err[worst]:.3g} at {tuple(map(int, worst))}"
        )


def assert_fields_close(what, fast_cache, ref_cache, fields):
    for field in fields:
        assert_close(f"{what}.{field}", getattr(fast_cache, field), getattr(ref_cache, field))


def assert_unchanged(what, arrays, copies):
    """The kernel left its inputs as they were."""
    for name, a, c in zip(what, arrays, copies):
        if a is not None:
            np.testing.assert_array_equal(_host(a), c, err_msg=f"the fast kernel changed its input {name}")


@contextlib.contextmanager
def small_blocks(on: bool):
    """With ``on``: attention cuts the batch into one piece per sequence and the query
    axis into blocks of one row (skipping the keys no row of a block sees), and GELU
    works in blocks of 8 elements, on two threads, so the piecewise code runs on small inputs."""
    if not on:
        yield
        return
    saved = (parallel.BLOCK_BYTES, fast_activations._BLOCK, parallel.threads(),
             fast_attention.MIN_LENGTH, fast_attention.MIN_BLOCK_ROWS, fast_attention.MIN_SAVING)
    parallel.BLOCK_BYTES, fast_activations._BLOCK = 1, 8
    fast_attention.MIN_LENGTH, fast_attention.MIN_BLOCK_ROWS, fast_attention.MIN_SAVING = 2, 1, -1.0
    parallel.set_threads(2)
    try:
        yield
    finally:
        parallel.BLOCK_BYTES, fast_activations._BLOCK = saved[0], saved[1]
        fast_attention.MIN_LENGTH, fast_attention.MIN_BLOCK_ROWS, fast_attention.MIN_SAVING = saved[3:]
        parallel.set_threads(saved[2])


def _run_forward(name, *args, **kwargs):
    """Run ``name`` of both sets on the same inputs (each on its own copy, so that a
    kernel that wrote into its input would be caught). Returns (fast, reference)."""
    copy = lambda a: a.copy() if hasattr(a, "copy") else a  # noqa: E731
    ref = REFERENCE[name](*[copy(a) for a in args], **{k: copy(v) for k, v in kwargs.items()})
    fast = FAST[name](*args, **kwargs)
    return fast, ref


# ---------------------------------------------------------------------------
# Coverage: every fast kernel has an equality test
# ---------------------------------------------------------------------------
def _without_equality_test(names) -> list[str]:
    """The kernel names with no equality test: not marked @covers here, and not listed
    in TESTED_ELSEWHERE with another tests/fast file that names them."""
    here = pathlib.Path(__file__)
    others = [p.read_text() for p in here.parent.glob("test_*.py") if p != here]
    return [name for name in names
            if name not in COVERED and not (name in TESTED_ELSEWHERE and any(name in t for t in others))]


def test_the_coverage_check_notices_a_kernel_without_a_test():
    assert _without_equality_test(["softmax_forward", "a_new_fast_kernel"]) == ["a_new_fast_kernel"]


def test_every_fast_kernel_has_an_equality_test():
    missing = _without_equality_test(FAST_KERNELS)
    assert not missing, (
        f"fast kernels without an equality test against the reference: {missing}; add one here "
        "(marked @covers(name)) or list the name in TESTED_ELSEWHERE with its test in tests/fast"
    )
    unknown = sorted(COVERED - set(kernels.NAMES))
    assert not unknown, f"@covers names that are not kernels: {unknown}"


def test_fast_set_is_the_reference_set_overridden_by_fast_kernels():
    assert set(FAST) == set(REFERENCE) == set(kernels.NAMES)
    for name in kernels.NAMES:
        expected = FAST_KERNELS.get(name, REFERENCE[name])
        assert FAST[name] is expected, f"table(\"fast\")[{name!r}] is not {expected}"


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
    xd = _dev(x)
    with np.errstate(invalid="ignore"):  # inf - inf in the "+inf and nan" case
        (p_f, cache_f), (p_r, cache_r) = _run_forward("softmax_forward", xd, axis=c["axis"])
    assert_unchanged(["x"], [xd], [x])
    assert_close("p", p_f, p_r)
    assert_fields_close("cache", cache_f, cache_r, ["p", "axis"])
    # the one backward (shared by both sets) gives the same gradient from either cache
    dp = _dev(np.random.default_rng(c["seed"] + 1).standard_normal(x.shape))
    with np.errstate(invalid="ignore"):
        dx_f, dx_r = REFERENCE["softmax_backward"](dp, cache_f), REFERENCE["softmax_backward"](dp, cache_r)
    assert_close("dx", dx_f, dx_r, scale=np.abs(_host(dp)).max())  # dx = p (dp - sum dp p): terms of the size of dp


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
    xd, td = _dev(x), _dev(t)
    kwargs = {"ignore_index": ii, "label_smoothing": c["eps"], "reduction": c["reduction"]}
    with np.errstate(invalid="ignore"):  # -inf - -inf on an ignored row (selected away, in both sets)
        (loss_f, cache_f), (loss_r, cache_r) = _run_forward("cross_entropy_forward", xd, td, **kwargs)
    assert_unchanged(["logits", "targets"], [xd, td], [x, t])
    assert_close("loss", loss_f, loss_r)
    assert_fields_close("cache", cache_f, cache_r, ["p", "targets", "weight", "smoothing", "shape"])

    if c["reduction"] == "none":
        dloss = _dev(g.standard_normal(lead))
    else:
        dloss = {"one": 1.0, "float": float(g.standard_normal()), "array": _dev(g.standard_normal(()))}[c["dloss"]]
    dx_f = FAST["cross_entropy_backward"](dloss, cache_f)
    dx_r = REFERENCE["cross_entropy_backward"](dloss, cache_r)
    scale = np.abs(_host(cache_r.weight) * np.abs(_host(dloss)).reshape(-1)).max()  # (p - q) w dloss, |p - q| <= 1
    assert_close("dlogits", dx_f, dx_r, scale=scale)
    assert (_host(dx_f)[ignored] == 0.0).all(), "ignored rows must get exactly zero gradient"
    assert_close("dlogits (second backward from the same cache)", FAST["cross_entropy_backward"](dloss, cache_f), dx_r,
                 scale=scale)


@covers("cross_entropy_forward", "cross_entropy_backward")
@SETTINGS
@given(c=cross_entropy_cases())
def test_cross_entropy(any_backend, c):
    _check_cross_entropy(c)



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
        mask = _host(causal_mask(Tq, Tk))
    elif kind == "padding":
        mask = padding()
    elif kind == "causal+padding":
        mask = _host(combine_masks(causal_mask(Tq, Tk), _dev(padding())))
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
    host = [q, k, v, mask, bias, drop]
    dev = [None if a is None else _dev(a) for a in host]
    qd, kd, vd, maskd, biasd, dropd = dev
    with small_blocks(c["small_blocks"]):
        (out_f, cache_f), (out_r, cache_r) = _run_forward(
            "attention_forward", qd, kd, vd, mask=maskd, scale=c["scale"], dropout_mask=dropd, bias=biasd)
        assert_unchanged(["q", "k", "v", "mask", "bias", "dropout_mask"], dev, host)
        assert_close("out", out_f, out_r, scale=np.abs(v).max() * _pd_max(drop))
        assert_fields_close("cache", cache_f, cache_r, ["p", "pd", "dropout_mask", "scale"])
        do = _dev(dout)
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
        assert (_host(out_f)[empty] == 0.0).all() and (_host(grads_f[0])[empty] == 0.0).all()


@covers("attention_forward", "attention_backward")
@SETTINGS
@given(c=attention_cases())
def test_attention(any_backend, c):
    _check_attention(c)



@pytest.mark.parametrize("bias_shape", [(2, 2, 3, 4), (2, 3, 4), (2, 1, 1, 4)])
def test_attention_bias_of_minus_inf_masks_whole_rows_without_a_mask(any_backend, bias_shape):
    """A bias of -inf is an additive mask; a query whose keys all get -inf outputs zeros
    (not NaN) and passes back zeros, in both sets, also when no boolean mask is given."""
    g = np.random.default_rng(11)
    q, k, v, dout = (g.standard_normal(s) for s in [(2, 2, 3, 2), (2, 2, 4, 2), (2, 2, 4, 3), (2, 2, 3, 3)])
    bias = g.standard_normal(bias_shape)
    bias[..., 0, :] = -np.inf  # the first query of every head (or, for (B, 1, 1, Tk), every query)
    bias[..., -1, 1] = -np.inf
    args = [_dev(a) for a in (q, k, v)]
    (out_f, cache_f), (out_r, cache_r) = _run_forward("attention_forward", *args, bias=_dev(bias))
    assert not np.isnan(_host(out_r)).any()
    assert_close("out", out_f, out_r, scale=np.abs(v).max())
    assert_close("p", cache_f.p, cache_r.p)
    for name, gf, gr in zip(["dq", "dk", "dv", "dbias"], FAST["attention_backward"](_dev(dout), cache_f),
                            REFERENCE["attention_backward"](_dev(dout), cache_r)):
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
    (out_f, cache_f), (out_r, cache_r) = _run_forward("attention_forward", q, k, v, mask=mask, dropout_mask=drop)
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
        for bias_shape in [(B, H, T, T), (1, H, T, T), (H, T, T)]:
            q, k, v, dout = (g.standard_normal((B, H, T, D)) for _ in range(4))
            lengths = g.integers(1, T + 1, size=B)
            mask = combine_masks(causal_mask(T), _dev((np.arange(T) < lengths[:, None])[:, None, None, :]))
            bias = _dev(g.standard_normal(bias_shape))
            args = [_dev(a) for a in (q, k, v)]
            (out_f, cache_f), (out_r, cache_r) = _run_forward("attention_forward", *args, mask=mask, bias=bias)
            assert_close("out", out_f, out_r)
            assert_close("p", cache_f.p, cache_r.p)
            for name, gf, gr in zip(["dq", "dk", "dv", "dbias"], FAST["attention_backward"](_dev(dout), cache_f),
                                    REFERENCE["attention_backward"](_dev(dout), cache_r)):
                assert_close(f"{name} (bias {bias_shape})", gf, gr)
    finally:
        parallel.set_threads(saved)


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
    xd, wd, bd = _dev(x), _dev(w), _dev(b)
    (y_f, cache_f), (y_r, cache_r) = _run_forward("layernorm_forward", xd, wd, bd, eps=c["eps"])
    assert_unchanged(["x", "w", "b"], [xd, wd, bd], [x, w, b])
    # xhat = (x - mu) rstd is the difference of terms of size |x| (0 up to the mean's rounding
    # on a constant row), times rstd
    xhat_scale = np.abs(x).max() * _host(cache_r.rstd).max()
    assert_close("cache.xhat", cache_f.xhat, cache_r.xhat, scale=xhat_scale)
    assert_close("y", y_f, y_r, scale=xhat_scale * np.abs(w).max() + np.abs(b).max())
    assert_fields_close("cache", cache_f, cache_r, ["rstd", "w"])
    dyd = _dev(dy)
    grads_f = FAST["layernorm_backward"](dyd, cache_f)
    grads_r = REFERENCE["layernorm_backward"](dyd, cache_r)
    again = FAST["layernorm_backward"](dyd, cache_f)
    assert_unchanged(["dy"], [dyd], [dy])
    # the size of the terms: dx = rstd (g - mean g - xhat mean(g xhat)), g = dy w;
    # dw = sum of dy xhat; db = sum of dy
    g_max, xhat_max = np.abs(dy).max() * np.abs(w).max(), max(np.abs(_host(cache_r.xhat)).max(), xhat_scale)
    scales = [_host(cache_r.rstd).max() * g_max * (1.0 + xhat_max ** 2), np.abs(dy).max() * xhat_max, np.abs(dy).max()]
    for name, gf, gr, g2, scale in zip(["dx", "dw", "db"], grads_f, grads_r, again, scales):
        assert_close(name, gf, gr, scale=scale)
        assert_close(f"{name} (second backward from the same cache)", g2, gr, scale=scale)


@covers("layernorm_forward", "layernorm_backward")
@SETTINGS
@given(c=layernorm_cases())
def test_layernorm(any_backend, compiled_mode, c):
    _check_layernorm(c)



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
    q, k, v, do = (_dev(g.standard_normal((B, H, T, d))) for _ in range(4))
    _, cache = FAST["attention_forward"](q, k, v)
    views = FAST["attention_backward"](do, cache)[:3]  # (B, H, T, d) each, one token-major buffer
    plain = [_dev(_host(a)) for a in views]  # the same values in arrays of their own
    for parts in (views, [views[i] for i in order][:n], plain[:n]):
        assert_close("merged", FAST["merge_heads"](*parts), REFERENCE["merge_heads"](*parts), scale=1.0)


# ---------------------------------------------------------------------------
# linear
# ---------------------------------------------------------------------------
@covers("linear_forward", "linear_backward")
@SETTINGS
@given(lead=st.lists(st.integers(0, 5), min_size=0, max_size=3), d_in=st.integers(1, 9),
       d_out=st.integers(1, 9), bias=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_linear_forward(any_backend, lead, d_in, d_out, bias, seed):
    g = np.random.default_rng(seed)
    x, W, b = g.standard_normal(tuple(lead) + (d_in,)), g.standard_normal((d_in, d_out)), g.standard_normal(d_out)
    xd, Wd, bd = _dev(x), _dev(W), (_dev(b) if bias else None)
    (y_f, cache_f), (y_r, cache_r) = _run_forward("linear_forward", xd, Wd, bd)
    assert_unchanged(["x", "W"], [xd, Wd], [x, W])
    scale = np.abs(x).max(initial=0.0) * np.abs(W).max() * d_in + (np.abs(b).max() if bias else 0.0)
    assert_close("y", y_f, y_r, scale=scale)
    assert cache_f.has_bias == cache_r.has_bias == bias
    dy = _dev(g.standard_normal(tuple(lead) + (d_out,)))
    # the fast backward (db by BLAS) from the fast cache against the reference's; the
    # size of the terms: dx, dW and db are sums of products of the entries of dy, W and x
    n_rows = max(1, int(np.prod(lead)))
    terms = np.abs(_host(dy)).max(initial=0.0) * max(1.0, np.abs(x).max(initial=0.0), np.abs(W).max())
    for name, gf, gr, n in zip(["dx", "dW", "db"], FAST["linear_backward"](dy, cache_f),
                               REFERENCE["linear_backward"](dy, cache_r), [d_out, n_rows, n_rows]):
        if gr is None:
            assert gf is None, f"{name}: the fast kernel gives a gradient the reference does not"
        else:
            assert_close(name, gf, gr, scale=n * terms)


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
    xd = _dev(x)
    with small_blocks(c["small_blocks"]), np.errstate(invalid="ignore"):  # inf * 0 = NaN for x = +-inf, in both
        (y_f, dydx_f), (y_r, dydx_r) = _run_forward("gelu_forward", xd, approximate)
    assert_unchanged(["x"], [xd], [x])
    if approximate == "tanh":
        assert_close("y", y_f, y_r)
        assert_close("dy/dx", dydx_f, dydx_r)
    else:
        ax = np.where(np.isfinite(x), np.abs(x), 0.0)
        assert_close("y", y_f, y_r, rtol=0.0, floor=GELU_Y_BOUND * ax + 1e-300)
        assert_close("dy/dx", dydx_f, dydx_r, rtol=0.0, floor=GELU_DYDX_BOUND[0] * ax + GELU_DYDX_BOUND[1])
    dy = _dev(np.random.default_rng(c["seed"] + 1).standard_normal(x.shape))
    # the backward is the reference's (dy * cache) in both sets (a blocked one on the
    # thread pool measured slower in a training step: benchmarks/RESULTS.md)
    assert FAST["gelu_backward"] is REFERENCE["gelu_backward"]
    np.testing.assert_array_equal(_host(FAST["gelu_backward"](dy, dydx_f)), _host(dy) * _host(dydx_f))


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
    n = 2 * fast_activations._BLOCK + 12345
    x = np.concatenate([np.linspace(-12.0, 12.0, n - 6), [1e4, -1e4, 1e3, -1e3, 30.0, -30.0]])
    saved = parallel.threads()
    parallel.set_threads(2)
    try:
        (y_f, d_f), (y_r, d_r) = _run_forward("gelu_forward", _dev(x), approximate)
    finally:
        parallel.set_threads(saved)
    if approximate == "tanh":
        assert_close("y", y_f, y_r)
        assert_close("dy/dx", d_f, d_r)
    else:
        assert_close("y", y_f, y_r, rtol=0.0, floor=GELU_Y_BOUND * np.abs(x) + 1e-300)
        assert_close("dy/dx", d_f, d_r, rtol=0.0, floor=GELU_DYDX_BOUND[0] * np.abs(x) + GELU_DYDX_BOUND[1])


# ---------------------------------------------------------------------------
# Embedding backward
# ---------------------------------------------------------------------------
@st.composite
def embedding_cases(draw):
    return {
        "shape": tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=3))),
        "V": draw(st.integers(1, 12)),
        "D": draw(st.integers(1, 6)),
        "distinct": draw(st.integers(1, 12)),  # ids drawn from this many values: many repeats
        "dtype": draw(st.sampled_from(["int64", "int32", "uint8"])),
        "seed": draw(st.integers(0, 2**32 - 1)),
    }


def _check_embedding(c):
    g = np.random.default_rng(c["seed"])
    V, D = c["V"], c["D"]
    pool = g.choice(V, size=min(V, c["distinct"]), replace=False)
    ids = g.choice(pool, size=c["shape"]).astype(c["dtype"])
    W = g.standard_normal((V, D))
    dout = g.standard_normal(c["shape"] + (D,))
    idsd, Wd, doutd = _dev(ids), _dev(W), _dev(dout)
    _, cache = REFERENCE["embedding_forward"](idsd, Wd)
    assert FAST["embedding_forward"] is REFERENCE["embedding_forward"]
    dW_f = FAST["embedding_backward"](doutd, cache)
    dW_r = REFERENCE["embedding_backward"](doutd, cache)
    assert_unchanged(["ids", "dout"], [idsd, doutd], [ids, dout])
    assert_close("dW", dW_f, dW_r)
    expected = np.zeros((V, D))
    np.add.at(expected, ids.reshape(-1), dout.reshape(-1, D))  # repeated ids sum
    assert_close("dW (against np.add.at)", dW_f, expected)


@covers("embedding_backward")
@SETTINGS
@given(c=embedding_cases())
def test_embedding_backward(any_backend, c):
    _check_embedding(c)



# ---------------------------------------------------------------------------
# The backward reads nothing the caller may overwrite
# ---------------------------------------------------------------------------
def _owned_cases():
    """(kernel, run) pairs: ``run(table)`` calls the forward of that kernel set and returns
    the arrays the caller owns afterwards (returned outputs, and inputs the reference's
    cache does not keep) and a function computing the backward from the cache."""
    g = np.random.default_rng(13)
    r = lambda *shape: _dev(g.standard_normal(shape))  # noqa: E731

    def attention(ks):
        q, k, v, bias, dout = r(3, 2, 4, 2), r(3, 2, 5, 2), r(3, 2, 5, 3), r(3, 2, 4, 5), r(3, 2, 4, 3)
        mask = _dev(g.random((3, 1, 4, 5)) < 0.8)
        out, cache = ks["attention_forward"](q, k, v, mask=mask, bias=bias)
        # The fast backward reads the returned output (its row term is dO . O; see the
        # docstring of minitransformer.fast.attention), the reference's does not.
        owned = [out, mask, bias] if ks is REFERENCE else [mask, bias]
        return owned, lambda: ks["attention_backward"](dout, cache)

    def cross_entropy(ks):
        logits, t = r(4, 3, 6), _dev(g.integers(0, 6, size=(4, 3)))
        loss, cache = ks["cross_entropy_forward"](logits, t, label_smoothing=0.1, reduction="none")
        dloss = r(4, 3)
        return [logits, t, loss], lambda: (ks["cross_entropy_backward"](dloss, cache),)

    def layernorm(ks):
        x, w, b, dy = r(4, 3, 6), r(6), r(6), r(4, 3, 6)
        y, cache = ks["layernorm_forward"](x, w, b)
        return [x, b, y], lambda: ks["layernorm_backward"](dy, cache)

    def softmax(ks):
        x, dp = r(4, 7), r(4, 7)
        p, cache = ks["softmax_forward"](x)
        return [x], lambda: (ks["softmax_backward"](dp, cache),)

    def gelu(ks):
        x, dy = r(5, 6), r(5, 6)
        y, cache = ks["gelu_forward"](x)
        return [x, y], lambda: (ks["gelu_backward"](dy, cache),)

    return {"attention": attention, "cross_entropy": cross_entropy, "layernorm": layernorm,
            "softmax": softmax, "gelu": gelu}


@pytest.mark.parametrize("kernel_set", ["reference", "fast"])
@pytest.mark.parametrize("kernel", sorted(_owned_cases()))
def test_backward_reads_nothing_the_caller_may_overwrite(any_backend, kernel, kernel_set):
    """After the forward the caller may write into the outputs it got (``y += x`` for a
    residual) and into inputs the reference's cache does not keep (the targets, the
    mask, the bias); the backward must give the same gradients as before. (One
    documented exception: the fast attention's output, see ``_owned_cases``.)"""
    owned, backward = _owned_cases()[kernel]({"reference": REFERENCE, "fast": FAST}[kernel_set])
    before = [_host(gr).copy() for gr in backward() if gr is not None]
    for a in owned:
        a[...] = (a == 0) if a.dtype == bool else 3  # overwrite the caller's arrays
    after = [_host(gr) for gr in backward() if gr is not None]
    for i, (b, a) in enumerate(zip(before, after)):
        np.testing.assert_array_equal(a, b, err_msg=f"{kernel_set} {kernel}: gradient {i} changed")


# ---------------------------------------------------------------------------
# float32 in, float32 out
# ---------------------------------------------------------------------------
def _float32_calls(g):
    """(name, kernel call taking a kernel set) for every fast kernel, on float32 inputs."""
    f32 = lambda *shape: _dev(g.standard_normal(shape).astype(np.float32))  # noqa: E731
    q, k, v, dout = f32(2, 2, 3, 4), f32(2, 2, 5, 4), f32(2, 2, 5, 3), f32(2, 2, 3, 3)
    mask, bias, drop = _dev(g.random((2, 1, 3, 5)) < 0.7), f32(1, 2, 3, 5), _dev((g.random((2, 2, 3, 5)) > 0.2).astype(np.float32) / np.float32(0.8))
    x, w, b, dy = f32(3, 4, 6), f32(6), f32(6), f32(3, 4, 6)
    logits, t = f32(3, 4, 7), _dev(g.integers(0, 7, size=(3, 4)))
    ids = _dev(g.integers(0, 5, size=(3, 4)))
    table = f32(5, 6)

    def attention(ks):
        out, cache = ks["attention_forward"](q, k, v, mask=mask, dropout_mask=drop, bias=bias)
        return (out, cache.p, cache.pd, *ks["attention_backward"](dout, cache))

    def cross_entropy(ks):
        loss, cache = ks["cross_entropy_forward"](logits, t, ignore_index=0, label_smoothing=0.1)
        return loss, cache.p, cache.weight, ks["cross_entropy_backward"](_dev(np.float32(1.0)), cache)

    def layernorm(ks):
        y, cache = ks["layernorm_forward"](x, w, b)
        return (y, cache.xhat, cache.rstd, *ks["layernorm_backward"](dy, cache))

    return [
        ("softmax_forward", lambda ks: ks["softmax_forward"](x)[:1]),
        ("cross_entropy_forward/backward", cross_entropy),
        ("attention_forward/backward", attention),
        ("layernorm_forward/backward", layernorm),
        ("gelu_forward none", lambda ks: ks["gelu_forward"](x, "none")),
        ("gelu_forward tanh", lambda ks: ks["gelu_forward"](x, "tanh")),
        ("embedding_backward", lambda ks: (ks["embedding_backward"](dy, ks["embedding_forward"](ids, table)[1]),)),
    ]


def test_float32_stays_float32(any_backend):
    for name, call in _float32_calls(np.random.default_rng(3)):
        outs_f, outs_r = call(FAST), call(REFERENCE)
        for i, (a, r) in enumerate(zip(outs_f, outs_r)):
            assert a.dtype == np.float32, f"{name}: output {i} is {a.dtype}, not float32"
            assert a.dtype == r.dtype and a.shape == r.shape, f"{name}: output {i} differs in dtype or shape"
            np.testing.assert_allclose(_host(a), _host(r), rtol=2e-5, atol=2e-6, err_msg=f"{name}: output {i}")


# ---------------------------------------------------------------------------
# Bad input: the same ValueError from both sets
# ---------------------------------------------------------------------------
def _bad_calls():
    g = np.random.default_rng(5)
    r = lambda *shape: _dev(g.standard_normal(shape))  # noqa: E731
    q, k, v = r(2, 2, 3, 4), r(2, 2, 5, 4), r(2, 2, 5, 3)
    logits, t = r(3, 6), _dev(np.array([1, 2, 3]))
    return [
        ("attention: float mask", "attention_forward", (q, k, v), {"mask": _dev(np.ones((3, 5)))}),
        ("attention: integer mask", "attention_forward", (q, k, v), {"mask": _dev(np.ones((3, 5), dtype=np.int64))}),
        ("attention: mask does not broadcast", "attention_forward", (q, k, v), {"mask": _dev(np.ones((3, 4), dtype=bool))}),
        ("attention: bias does not broadcast", "attention_forward", (q, k, v), {"bias": r(2, 3, 3, 5)}),
        ("attention: 3-D q", "attention_forward", (r(2, 3, 4), k, v), {}),
        ("attention: Dh differs", "attention_forward", (r(2, 2, 3, 2), k, v), {}),
        ("cross_entropy: bad reduction", "cross_entropy_forward", (logits, t), {"reduction": "avg"}),
        ("cross_entropy: smoothing 1", "cross_entropy_forward", (logits, t), {"label_smoothing": 1.0}),
        ("cross_entropy: negative smoothing", "cross_entropy_forward", (logits, t), {"label_smoothing": -0.1}),
        ("cross_entropy: targets shape", "cross_entropy_forward", (logits, _dev(np.array([1, 2]))), {}),
        ("cross_entropy: float targets", "cross_entropy_forward", (logits, _dev(np.array([1.0, 2.0, 3.0]))), {}),
        ("cross_entropy: target out of range", "cross_entropy_forward", (logits, _dev(np.array([1, 6, 0]))), {}),
        ("cross_entropy: negative target", "cross_entropy_forward", (logits, _dev(np.array([1, -1, 0]))), {"ignore_index": -100}),
        ("cross_entropy: smoothing with 1 class", "cross_entropy_forward", (r(3, 1), _dev(np.zeros(3, dtype=int))), {"label_smoothing": 0.1}),
        ("layernorm: width", "layernorm_forward", (r(2, 5), r(4), r(4)), {}),
        ("gelu: approximate", "gelu_forward", (r(3),), {"approximate": "erf"}),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())), ids=[c[0] for c in _bad_calls()])
def test_bad_input_raises_the_same_value_error(any_backend, case):
    what, name, args, kwargs = _bad_calls()[case]  # built inside the test: on the active backend
    errors = {}
    for set_name, table in (("reference", REFERENCE), ("fast", FAST)):
        try:
            table[name](*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - compared below
            errors[set_name] = err
    if "reference" not in errors:
        assert "fast" not in errors, f"{what}: only the fast kernel raised {errors['fast']!r}"
        assert not backend.values_on_host(args[0]), f"{what}: the reference raised nothing"
        return  # a value check that a device backend skips, by design
    assert "fast" in errors, f"{what}: the reference raised {errors['reference']!r}, the fast kernel nothing"
    ref, fast = errors["reference"], errors["fast"]
    assert type(fast) is type(ref) and str(fast) == str(ref), f"{what}: fast raised {fast!r}, reference {ref!r}"
    if backend.values_on_host(args[0]) or "out of range" not in what and "negative" not in what:
        assert isinstance(ref, ValueError), f"{what}: the reference raised {ref!r}, not a ValueError"
    # (on a device backend the target values are not read, by design: both fail at the lookup)
