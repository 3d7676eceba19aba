"""cross_entropy_forward / cross_entropy_backward: smoothing, ignore_index,
reductions, closed form, extreme logits, dtype, shape errors."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward
from minitransformer.gradcheck import check_kernel

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _dev(a):
    return backend.asarray(np.asarray(a))


def _backward(dout, cache):
    return cross_entropy_backward(dout, cache)


def _host_log_softmax(x):
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def _closed_form_rows(x, t, eps, ignore_index=None):
    """-sum_j q_j log p_j per row, with q built explicitly (0 for ignored rows)."""
    N, V = x.shape
    logp = _host_log_softmax(x)
    losses = np.zeros(N)
    for n in range(N):
        if ignore_index is not None and t[n] == ignore_index:
            continue
        q = np.full(V, eps / (V - 1))
        q[t[n]] = 1.0 - eps
        losses[n] = -(q * logp[n]).sum()
    return losses


# -- gradient checks -----------------------------------------------------------------
@pytest.mark.parametrize("kwargs", [
    {},
    {"reduction": "sum"},
    {"label_smoothing": 0.1},
    {"ignore_index": 0},
    {"ignore_index": -100, "label_smoothing": 0.2, "reduction": "sum"},
    {"ignore_index": 2, "label_smoothing": 0.3, "reduction": "none"},
    {"ignore_index": 0, "label_smoothing": 0.1, "reduction": "mean"},  # the trainer's: pads, smoothing, mean
], ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()) or "plain")
def test_gradcheck(any_backend, float64, randn, kwargs):
    targets = np.array([[2, 0, 4], [1, 2, -100 if kwargs.get("ignore_index") == -100 else 3]])
    check_kernel(cross_entropy_forward, _backward,
                 {"logits": randn(2, 3, 5, scale=2.0), "targets": _dev(targets)}, kwargs)


# -- reductions and ignored rows -----------------------------------------------------
def test_mean_divides_by_non_ignored_count(any_backend, float64, randn):
    logits, t = randn(6, 4), _dev(np.array([1, 0, 0, 3, 2, 0]))  # 3 of 6 ignored
    total, _ = cross_entropy_forward(logits, t, ignore_index=0, reduction="sum")
    mean, _ = cross_entropy_forward(logits, t, ignore_index=0, reduction="mean")
    np.testing.assert_allclose(float(mean), float(total) / 3, rtol=1e-14)


def test_sum_mean_none_agree(any_backend, float64, randn):
    logits, t = randn(2, 3, 4), _dev(np.array([[1, 0, 3], [2, 2, 1]]))
    rows, _ = cross_entropy_forward(logits, t, reduction="none", label_smoothing=0.1)
    total, _ = cross_entropy_forward(logits, t, reduction="sum", label_smoothing=0.1)
    mean, _ = cross_entropy_forward(logits, t, reduction="mean", label_smoothing=0.1)
    assert rows.shape == (2, 3)
    np.testing.assert_allclose(float(total), backend.to_numpy(rows).sum(), rtol=1e-14)
    np.testing.assert_allclose(float(mean), float(total) / 6, rtol=1e-14)
    expected = _closed_form_rows(backend.to_numpy(logits).reshape(6, 4), [1, 0, 3, 2, 2, 1], 0.1)
    np.testing.assert_allclose(backend.to_numpy(rows).reshape(-1), expected, rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ignored_rows_get_exactly_zero_gradient(any_backend, float64, randn, reduction):
    logits, t = randn(5, 4, scale=3.0), _dev(np.array([3, 1, 1, 0, 1]))
    loss, cache = cross_entropy_forward(logits, t, ignore_index=1, label_smoothing=0.1, reduction=reduction)
    dloss = randn(5) if reduction == "none" else 1.0
    d = backend.to_numpy(cross_entropy_backward(dloss, cache))
    assert (d[[1, 2, 4]] == 0.0).all()
    assert (d[[0, 3]] != 0.0).all()
    if reduction == "none":
        assert (backend.to_numpy(loss)[[1, 2, 4]] == 0.0).all()


def test_all_rows_ignored_is_zero_not_nan(any_backend, float64, randn):
    logits = randn(3, 4)
    loss, cache = cross_entropy_forward(logits, _dev(np.array([0, 0, 0])), ignore_index=0)
    assert float(loss) == 0.0
    assert (backend.to_numpy(cross_entropy_backward(1.0, cache)) == 0.0).all()


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_ignored_rows_with_infinite_logits_do_not_poison_the_loss(any_backend, float64, eps):
    # class 0 (the pad token) is banned with a -inf logit, and pad targets are ignored:
    # the ignored rows' placeholder loss is infinite and must be dropped, not multiplied by 0
    x = np.array([[-np.inf, 1.0, 2.0], [-np.inf, 0.5, -1.0], [-np.inf, 3.0, 0.0]])
    t = np.array([2, 0, 1])
    loss, cache = cross_entropy_forward(_dev(x), _dev(t), ignore_index=0)
    kept = _closed_form_rows(x[[0, 2], 1:], np.array([1, 0]), 0.0)  # class 0 has probability 0
    np.testing.assert_allclose(float(loss), kept.mean(), rtol=1e-14)
    assert np.isfinite(backend.to_numpy(cross_entropy_backward(1.0, cache))).all()
    if eps:  # smoothing puts mass on the banned class: the kept rows' loss is +inf, still not NaN
        loss, _ = cross_entropy_forward(_dev(x), _dev(t), ignore_index=0, label_smoothing=eps)
        assert float(loss) == np.inf


# -- closed form ---------------------------------------------------------------------
@SETTINGS
@given(V=st.integers(2, 8), N=st.integers(1, 5), eps=st.floats(0.0, 0.95),
       seed=st.integers(0, 2**31 - 1), scale=st.sampled_from([0.1, 1.0, 20.0]))
def test_smoothed_loss_equals_closed_form(any_backend, V, N, eps, seed, scale):
    g = np.random.default_rng(seed)
    x, t = g.standard_normal((N, V)) * scale, g.integers(0, V, N)
    rows, _ = cross_entropy_forward(_dev(x), _dev(t), label_smoothing=eps, reduction="none")
    expected = _closed_form_rows(x, t, eps)
    np.testing.assert_allclose(backend.to_numpy(rows), expected, rtol=1e-10, atol=1e-12)
    mean, _ = cross_entropy_forward(_dev(x), _dev(t), label_smoothing=eps)
    np.testing.assert_allclose(float(mean), expected.mean(), rtol=1e-10, atol=1e-12)
    pad = int(t[0])  # the first row's target as the pad: the mean is over the other rows only
    keep = t != pad
    mean, _ = cross_entropy_forward(_dev(x), _dev(t), label_smoothing=eps, ignore_index=pad)
    expected = _closed_form_rows(x, t, eps, ignore_index=pad)
    np.testing.assert_allclose(float(mean), expected[keep].sum() / keep.sum() if keep.any() else 0.0,
                               rtol=1e-10, atol=1e-12)


# -- extremes and dtypes -------------------------------------------------------------
@pytest.mark.parametrize("dtype,scale", [(np.float32, 1e30), (np.float64, 1e30), (np.float64, 1e300)])
def test_huge_logits_give_no_nan(any_backend, dtype, scale):
    g = np.random.default_rng(0)
    logits = _dev((g.standard_normal((4, 5)) * scale).astype(dtype))
    t = _dev(np.array([1, 0, 4, 2]))
    for kw in ({}, {"label_smoothing": 0.1, "ignore_index": 0}):
        loss, cache = cross_entropy_forward(logits, t, **kw)
        d = backend.to_numpy(cross_entropy_backward(1.0, cache))
        assert not np.isnan(float(loss)) and np.isfinite(d).all()


def test_float32_stays_float32(any_backend):
    g = np.random.default_rng(0)
    logits = _dev(g.standard_normal((2, 3, 6)).astype(np.float32))
    t = _dev(np.array([[0, 5, 2], [1, 1, 3]]))
    for reduction in ("mean", "sum", "none"):
        loss, cache = cross_entropy_forward(logits, t, ignore_index=1, label_smoothing=0.1, reduction=reduction)
        assert loss.dtype == np.float32
        assert cache[0].dtype == np.float32  # the (N, V) softmax kept for backward
        dloss = _dev(np.ones((2, 3), dtype=np.float32)) if reduction == "none" else 1.0
        d = cross_entropy_backward(dloss, cache)
        assert d.dtype == np.float32 and d.shape == (2, 3, 6)


# -- validation ----------------------------------------------------------------------
def test_targets_shape_mismatch_raises(any_backend, float64, randn):
    with pytest.raises(ValueError, match=r"targets of shape \(2, 4\).*expected targets of shape \(2, 3\)"):
        cross_entropy_forward(randn(2, 3, 5), _dev(np.zeros((2, 4), dtype=np.int64)))


def test_out_of_range_and_float_targets_raise(float64, randn):  # values are read on NumPy only
    with pytest.raises(ValueError, match="token id 5 is out of range for a vocabulary of size 5"):
        cross_entropy_forward(randn(2, 5), _dev(np.array([0, 5])))
    with pytest.raises(ValueError, match="integer array"):
        cross_entropy_forward(randn(2, 5), _dev(np.array([0.0, 1.0])))


def test_bad_options_raise(any_backend, float64, randn):
    logits, t = randn(2, 3), _dev(np.array([0, 1]))
    with pytest.raises(ValueError, match="reduction"):
        cross_entropy_forward(logits, t, reduction="avg")
    with pytest.raises(ValueError, match=r"label_smoothing must be in \[0, 1\)"):
        cross_entropy_forward(logits, t, label_smoothing=1.0)
