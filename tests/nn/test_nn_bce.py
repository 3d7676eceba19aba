"""masked_bce_forward / masked_bce_backward: missing labels (mask and NaN), pos_weight,
reductions, extreme logits, agreement with the naive formula, dtype, validation."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend, devices
from minitransformer.functional import masked_bce_backward, masked_bce_forward
from minitransformer.gradcheck import check_kernel

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])

# 3 samples x 4 labels; the mask hides 4 of the 12 entries
MASK = np.array([[1, 1, 0, 1], [0, 1, 1, 1], [1, 0, 1, 0]], dtype=bool)
TARGETS = np.array([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]])
POS_WEIGHT = np.array([2.0, 0.5, 1.0, 3.0])


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return np.asarray(backend.to_numpy(a), dtype=np.float64)


def _backward(dout, cache):
    return masked_bce_backward(dout, cache)


def _assert_close(name, actual, expected, rtol=1e-12, atol=1e-14):
    """``|actual - expected| <= max(rtol |expected|, atol)`` element-wise (NaN matches NaN);
    the failure message names the tensor, the largest error and where it is."""
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape}, expected {expected.shape}"
    same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
    with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(actual - expected))
    diff = np.where(np.isnan(diff), np.inf, diff)
    bad = diff > np.maximum(rtol * np.abs(expected), atol)
    if bad.any():
        idx = np.unravel_index(int(np.argmax(np.where(bad, diff, -1.0))), diff.shape) if diff.ndim else ()
        raise AssertionError(
            f"{name}: {int(bad.sum())} of {diff.size} entries off (rtol {rtol:g}, atol {atol:g}); largest "
            f"error {diff[idx]:.3g} at {[int(i) for i in idx]}: got {actual[idx]!r}, expected {expected[idx]!r}"
        )


def _naive(z, y, present, pw=None):
    """Per-entry loss and d loss / dz by the textbook formulas, in float64 (moderate z only)."""
    p = np.ones(z.shape[-1]) if pw is None else pw
    s = 1.0 / (1.0 + np.exp(-z))
    loss = -p * y * np.log(s) - (1.0 - y) * np.log(1.0 - s)
    grad = s * (1.0 - y + p * y) - p * y  # d/dz of the line above
    return np.where(present, loss, 0.0), np.where(present, grad, 0.0)


# -- gradient checks -----------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"mask": True},
    {"nan": True},
    {"pos_weight": True},
    {"mask": True, "pos_weight": True, "reduction": "sum"},
    {"mask": True, "nan": True, "pos_weight": True, "reduction": "none"},
    {"soft": True, "mask": True, "pos_weight": True},
], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "plain")
def test_gradcheck(any_backend, float64, randn, kwargs):
    kwargs = dict(kwargs)
    y = TARGETS.copy()
    if kwargs.pop("soft", False):
        y = np.array([[0.9, 0.1, 0.5, 1.0], [0.0, 0.25, 0.75, 0.3], [1.0, 0.6, 0.0, 0.05]])
    if kwargs.pop("nan", False):
        y[0, 0] = y[2, 3] = np.nan
    fwd = {"targets": _dev(y), "reduction": kwargs.pop("reduction", "mean")}
    if kwargs.pop("mask", False):
        fwd["mask"] = _dev(MASK)
    if kwargs.pop("pos_weight", False):
        fwd["pos_weight"] = _dev(POS_WEIGHT)
    check_kernel(masked_bce_forward, _backward, {"logits": randn(3, 4, scale=2.0)}, fwd)


# -- missing labels ------------------------------------------------------------------
@pytest.mark.filterwarnings("error")  # no "invalid value" or "divide by zero" on the way
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_missing_entries_get_exactly_zero_even_with_inf_logits_and_nan_targets(any_backend, float64,
                                                                               reduction):
    y = TARGETS.copy()
    y[1, 0] = y[2, 1] = np.nan  # NaN targets: missing
    mask = MASK.copy()
    mask[1, 0] = True  # the NaN target alone marks [1, 0] missing
    present = mask & ~np.isnan(y)  # missing: [0, 2], [1, 0], [2, 1], [2, 3]
    z = np.array([[0.7, -1.0, np.inf, 0.5], [np.nan, 2.0, -0.4, -1.5], [0.3, -np.inf, 1.0, 1e4]])
    assert np.isfinite(z[present]).all() and not np.isfinite(z[~present][:3]).any()
    loss, cache = masked_bce_forward(_dev(z), _dev(y), _dev(mask), pos_weight=_dev(POS_WEIGHT),
                                     reduction=reduction)
    dloss = _dev(np.where(present, 1.5, np.nan)) if reduction == "none" else 1.0  # NaN upstream too
    d = _host(masked_bce_backward(dloss, cache))
    assert (d[~present] == 0.0).all(), f"dlogits at missing entries: {d[~present]}"
    assert np.isfinite(d).all() and (d[present] != 0.0).all()
    exp_loss, exp_grad = _naive(np.where(present, z, 0.0), np.where(present, y, 0.0), present, POS_WEIGHT)
    n = present.sum()
    if reduction == "none":
        assert (_host(loss)[~present] == 0.0).all()
        _assert_close("loss (none)", _host(loss), exp_loss, rtol=1e-12)
        _assert_close("dlogits (none)", d, 1.5 * exp_grad, rtol=1e-12)
    else:
        scale = 1.0 / n if reduction == "mean" else 1.0
        _assert_close(f"loss ({reduction})", float(loss), exp_loss.sum() * scale, rtol=1e-12)
        _assert_close(f"dlogits ({reduction})", d, exp_grad * scale, rtol=1e-12)


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("how", ["mask", "nan", "both"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_all_missing_is_zero_loss_and_zero_gradient(any_backend, float64, randn, how, reduction):
    z = randn(2, 3)
    y = np.full((2, 3), np.nan) if how in ("nan", "both") else np.ones((2, 3))
    mask = _dev(np.zeros((2, 3), dtype=bool)) if how in ("mask", "both") else None
    loss, cache = masked_bce_forward(z, _dev(y), mask, reduction=reduction)
    assert (_host(loss) == 0.0).all()
    dloss = _dev(np.ones((2, 3))) if reduction == "none" else 1.0
    d = _host(masked_bce_backward(dloss, cache))
    assert d.shape == (2, 3) and (d == 0.0).all()


def test_nan_targets_mean_the_same_as_a_mask(any_backend, float64, randn):
    z = randn(3, 4, scale=2.0)
    y_nan = np.where(MASK, TARGETS, np.nan)
    y_junk = np.where(MASK, TARGETS, -1.0)  # a placeholder outside [0, 1] is fine where masked
    for reduction in ("mean", "sum", "none"):
        a, ca = masked_bce_forward(z, _dev(y_nan), reduction=reduction, pos_weight=POS_WEIGHT)
        b, cb = masked_bce_forward(z, _dev(y_junk), _dev(MASK.astype(np.int64)), reduction=reduction,
                                   pos_weight=POS_WEIGHT)
        _assert_close(f"loss ({reduction}), NaN vs 0/1 mask", _host(a), _host(b), rtol=0)
        dl = _dev(np.ones((3, 4))) if reduction == "none" else 1.0
        _assert_close(f"dlogits ({reduction}), NaN vs 0/1 mask", _host(masked_bce_backward(dl, ca)),
                      _host(masked_bce_backward(dl, cb)), rtol=0)


# -- reductions, weights, upstream gradient ------------------------------------------
def test_mean_divides_by_the_number_of_present_labels(any_backend, float64, randn):
    z, y, m = randn(3, 4), _dev(TARGETS), _dev(MASK)
    rows, _ = masked_bce_forward(z, y, m, reduction="none")
    total, _ = masked_bce_forward(z, y, m, reduction="sum")
    mean, cache = masked_bce_forward(z, y, m, reduction="mean")
    _assert_close("sum vs none.sum()", float(total), _host(rows).sum(), rtol=1e-14)
    _assert_close("mean vs sum / 8", float(mean), float(total) / 8, rtol=1e-14)
    d_sum = _host(masked_bce_backward(1.0, masked_bce_forward(z, y, m, reduction="sum")[1]))
    _assert_close("mean gradient vs sum gradient / 8", _host(masked_bce_backward(1.0, cache)), d_sum / 8,
                  rtol=1e-14)


def test_unit_pos_weight_changes_nothing_and_scales_only_positives(any_backend, float64, randn):
    z, y, m = randn(3, 4, scale=3.0), _dev(TARGETS), _dev(MASK)
    plain, cp = masked_bce_forward(z, y, m, reduction="none")
    ones, co = masked_bce_forward(z, y, m, reduction="none", pos_weight=np.ones(4))
    _assert_close("loss with pos_weight=1", _host(ones), _host(plain), rtol=0)
    dl = _dev(np.ones((3, 4)))
    _assert_close("dlogits with pos_weight=1", _host(masked_bce_backward(dl, co)),
                  _host(masked_bce_backward(dl, cp)), rtol=1e-15)
    weighted, _ = masked_bce_forward(z, y, m, reduction="none", pos_weight=POS_WEIGHT)
    expected = np.where(TARGETS == 1, POS_WEIGHT, 1.0) * _host(plain)  # hard labels: one term each
    _assert_close("loss with pos_weight", _host(weighted), expected, rtol=1e-14)


def test_backward_is_linear_in_dloss_and_repeatable(any_backend, float64, randn):
    loss, cache = masked_bce_forward(randn(3, 4), _dev(TARGETS), _dev(MASK), pos_weight=POS_WEIGHT)
    d1 = _host(masked_bce_backward(1.0, cache))
    _assert_close("second backward", _host(masked_bce_backward(1.0, cache)), d1, rtol=0)
    _assert_close("backward(2.5)", _host(masked_bce_backward(2.5, cache)), 2.5 * d1, rtol=1e-15)
    _assert_close("backward(0-d 2.5)", _host(masked_bce_backward(_dev(np.array(2.5)), cache)), 2.5 * d1,
                  rtol=1e-15)


def test_forward_does_not_touch_its_inputs(any_backend, float64, randn):
    z = randn(3, 4)
    y = np.where(MASK, TARGETS, np.nan)
    z0, y_dev, m_dev = _host(z).copy(), _dev(y), _dev(MASK)
    _, cache = masked_bce_forward(z, y_dev, m_dev, pos_weight=POS_WEIGHT)
    masked_bce_backward(1.0, cache)
    np.testing.assert_array_equal(_host(z), z0)
    np.testing.assert_array_equal(_host(y_dev), y)
    np.testing.assert_array_equal(backend.to_numpy(m_dev), MASK)


# -- closed form and properties ------------------------------------------------------
@SETTINGS
@given(B=st.integers(1, 6), K=st.integers(1, 5), seed=st.integers(0, 2**31 - 1),
       scale=st.sampled_from([0.1, 1.0, 4.0]), keep=st.floats(0.0, 1.0),
       weighted=st.booleans(), soft=st.booleans())
def test_agrees_with_the_naive_float64_formula(any_backend, B, K, seed, scale, keep, weighted, soft):
    g = np.random.default_rng(seed)
    # moderate logits: beyond |z| ~ 10 the naive log(1 - sigmoid(z)) itself loses digits
    z = np.clip(g.standard_normal((B, K)) * scale, -10.0, 10.0)
    y = g.random((B, K)) if soft else (g.random((B, K)) < 0.4).astype(np.float64)
    mask = g.random((B, K)) < keep
    pw = g.uniform(0.2, 5.0, K) if weighted else None
    exp_loss, exp_grad = _naive(z, y, mask, pw)
    n = max(int(mask.sum()), 1)
    rows, cache = masked_bce_forward(_dev(z), _dev(y), _dev(mask), pos_weight=pw, reduction="none")
    _assert_close("loss (none)", _host(rows), exp_loss, rtol=1e-10, atol=1e-13)
    dl = g.standard_normal((B, K))
    _assert_close("dlogits (none)", _host(masked_bce_backward(_dev(dl), cache)), exp_grad * dl,
                  rtol=1e-10, atol=1e-13)
    mean, cache = masked_bce_forward(_dev(z), _dev(y), _dev(mask), pos_weight=pw)
    _assert_close("loss (mean)", float(mean), exp_loss.sum() / n, rtol=1e-10, atol=1e-13)
    _assert_close("dlogits (mean)", _host(masked_bce_backward(1.0, cache)), exp_grad / n, rtol=1e-10, atol=1e-13)


@SETTINGS
@given(seed=st.integers(0, 2**31 - 1), log_scale=st.floats(-2.0, 4.5))
def test_loss_is_nonnegative_and_gradient_bounded(any_backend, seed, log_scale):
    g = np.random.default_rng(seed)
    z = g.standard_normal((4, 3)) * 10.0 ** log_scale
    y = (g.random((4, 3)) < 0.5).astype(np.float64)
    pw = g.uniform(0.0, 4.0, 3)
    rows, cache = masked_bce_forward(_dev(z), _dev(y), pos_weight=pw, reduction="none")
    d = _host(masked_bce_backward(_dev(np.ones((4, 3))), cache))
    loss = _host(rows)
    assert np.isfinite(loss).all() and (loss >= 0).all()
    bound = np.where(y == 1, pw, 1.0)
    assert (np.abs(d) <= bound * (1 + 1e-15)).all()
    # the gradient points towards the target: negative for positives, positive for negatives
    assert (d[y == 1] <= 0).all() and (d[y == 0] >= 0).all()


# -- extremes and dtypes -------------------------------------------------------------
@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_logits_of_size_1e4_stay_finite_and_exact(any_backend, dtype):
    z = np.array([[1e4, -1e4, 1e4, -1e4]], dtype=dtype)
    y = np.array([[1.0, 0.0, 0.0, 1.0]], dtype=dtype)
    pw = np.array([3.0, 3.0, 3.0, 3.0], dtype=dtype)
    rows, cache = masked_bce_forward(_dev(z), _dev(y), pos_weight=pw, reduction="none")
    # right answers cost nothing; wrong ones cost |z| (times pos_weight for a missed positive)
    _assert_close("loss at |z| = 1e4", _host(rows), [[0.0, 0.0, 1e4, 3e4]], rtol=1e-7)
    d = _host(masked_bce_backward(_dev(np.ones((1, 4), dtype=dtype)), cache))
    _assert_close("dlogits at |z| = 1e4", d, [[0.0, 0.0, 1.0, -3.0]], rtol=0)
    mean, cache = masked_bce_forward(_dev(z), _dev(y))
    assert np.isfinite(float(mean)) and np.isfinite(_host(masked_bce_backward(1.0, cache))).all()


def test_float32_stays_float32(any_backend):
    g = np.random.default_rng(0)
    z = _dev(g.standard_normal((3, 4)).astype(np.float32))
    y = _dev(np.where(MASK, TARGETS, np.nan).astype(np.float32))
    for reduction in ("mean", "sum", "none"):
        loss, cache = masked_bce_forward(z, y, pos_weight=POS_WEIGHT, reduction=reduction)
        assert loss.dtype == np.float32
        dloss = _dev(np.ones((3, 4), dtype=np.float32)) if reduction == "none" else 1.0
        d = masked_bce_backward(dloss, cache)
        assert d.dtype == np.float32 and d.shape == (3, 4)


def test_integer_and_bool_targets_are_accepted(any_backend, float64, randn):
    z = randn(3, 4)
    ref, _ = masked_bce_forward(z, _dev(TARGETS), _dev(MASK))
    for t in (TARGETS.astype(np.int64), TARGETS.astype(bool)):
        loss, _ = masked_bce_forward(z, _dev(t), _dev(MASK))
        assert float(loss) == float(ref)


# -- validation ----------------------------------------------------------------------
def test_shape_mismatches_raise(any_backend, float64, randn):
    z = randn(3, 4)
    with pytest.raises(ValueError, match=r"targets of shape \(4, 3\).*expected targets of shape \(3, 4\)"):
        masked_bce_forward(z, _dev(TARGETS.T))
    with pytest.raises(ValueError, match=r"mask of shape \(3, 3\).*expected a \(B, K\) mask"):
        masked_bce_forward(z, _dev(TARGETS), _dev(MASK[:, :3]))
    with pytest.raises(ValueError, match=r"pos_weight must have shape \(K,\) = \(4,\).*got shape \(3,\)"):
        masked_bce_forward(z, _dev(TARGETS), pos_weight=np.ones(3))
    with pytest.raises(ValueError, match=r"logits must have shape \(B, K\), got \(12,\).*\(B, 1\)"):
        masked_bce_forward(randn(12), _dev(TARGETS.reshape(-1)))


def test_targets_outside_0_1_raise_with_value_and_position(float64, randn):
    """Value checks run where reading values is free (NumPy); a GPU checks the host batch."""
    y = TARGETS.copy()
    y[1, 2] = -1.0
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 1\], got target -1\.0 at \[1, 2\]; "
                                         r"mark missing labels with mask= or NaN"):
        masked_bce_forward(randn(3, 4), _dev(y))
    y[1, 2] = 2.0
    with pytest.raises(ValueError, match=r"got target 2\.0 at \[1, 2\]"):
        masked_bce_forward(randn(3, 4), _dev(y), _dev(MASK))
    y[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"got target inf at \[1, 2\]"):
        masked_bce_forward(randn(3, 4), _dev(y))


def test_bad_options_raise(any_backend, float64, randn):
    z, y = randn(3, 4), _dev(TARGETS)
    with pytest.raises(ValueError, match=r"reduction must be 'mean', 'sum' or 'none', got 'avg'"):
        masked_bce_forward(z, y, reduction="avg")
    with pytest.raises(ValueError, match="logits must be a floating-point array, got dtype int64"):
        masked_bce_forward(_dev(np.zeros((3, 4), dtype=np.int64)), y)


def test_bad_values_raise(float64, randn):
    """Value checks run where reading values is free (NumPy); a GPU checks the host batch."""
    z, y = randn(3, 4), _dev(TARGETS)
    with pytest.raises(ValueError, match=r"mask must be boolean or hold only 0 and 1, got value 2\.0 at \[0, 1\]"):
        masked_bce_forward(z, y, _dev(np.array([[1, 2, 0, 1]] * 3)))
    with pytest.raises(ValueError, match="pos_weight must be finite and >= 0"):
        masked_bce_forward(z, y, pos_weight=np.array([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match="pos_weight must be finite and >= 0"):
        masked_bce_forward(z, y, pos_weight=np.array([1.0, np.nan, 1.0, 1.0]))


def test_device_values_are_not_read_back(randn):
    """On a GPU backend (strict stands in) the forward never reads values back: the
    checks above would stall the device, so they are left to the host batch."""
    backend.use("strict")
    z, y = backend.asarray(np.zeros((3, 4), np.float32)), backend.asarray(TARGETS.astype(np.float32))
    with devices.forbid_host_sync():
        loss, cache = masked_bce_forward(z, y, _dev(MASK), pos_weight=backend.asarray(np.ones(4, np.float32)))
        masked_bce_backward(1.0, cache)
