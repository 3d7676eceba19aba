"""softmax_forward / softmax_backward / log_softmax."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from minitransformer import backend
from minitransformer.functional import log_softmax, softmax_backward, softmax_forward
from minitransformer.gradcheck import check_kernel

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=3, max_side=6),
                    elements=st.floats(-1e300, 1e300, allow_nan=False)),
       axis=st.integers(-1, 0))
def test_rows_sum_to_one(any_backend, x, axis):
    p, _ = softmax_forward(backend.asarray(x), axis=axis)
    p = backend.to_numpy(p)
    assert np.isfinite(p).all() and (p >= 0).all() and (p <= 1).all()
    np.testing.assert_allclose(p.sum(axis=axis), 1.0, rtol=1e-12)


@SETTINGS
@given(x=hnp.arrays(np.float64, hnp.array_shapes(min_dims=1, max_dims=2, max_side=5),
                    elements=st.floats(-30, 30)))
def test_matches_direct_formula(any_backend, x):
    p, _ = softmax_forward(backend.asarray(x))
    e = np.exp(x)
    np.testing.assert_allclose(backend.to_numpy(p), e / e.sum(axis=-1, keepdims=True), rtol=1e-12, atol=1e-300)


def test_backward_equals_explicit_jacobian_product(any_backend, float64):
    x = np.array([0.3, -1.2, 2.0, 0.5])
    dy = np.array([1.0, -2.0, 0.5, 3.0])
    p, cache = softmax_forward(backend.asarray(x))
    p = backend.to_numpy(p)
    J = np.diag(p) - np.outer(p, p)  # J[i, j] = d p_i / d x_j
    dx = backend.to_numpy(softmax_backward(backend.asarray(dy), cache))
    np.testing.assert_allclose(dx, J.T @ dy, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("shape,axis", [((5,), -1), ((2, 4), -1), ((3, 2, 3), 1), ((3, 4), 0)])
def test_gradcheck(any_backend, float64, randn, shape, axis):
    check_kernel(softmax_forward, softmax_backward, {"x": randn(*shape, scale=2.0)}, {"axis": axis})


def test_log_softmax_stable_and_consistent(any_backend, float64, randn):
    x = randn(3, 5)
    p, _ = softmax_forward(x)
    np.testing.assert_allclose(backend.to_numpy(log_softmax(x)), np.log(backend.to_numpy(p)), rtol=1e-12)
    big = backend.asarray(np.array([[1e30, 0.0, -1e30], [1000.0, 999.0, 998.0]]))
    lp = backend.to_numpy(log_softmax(big))
    assert not np.isnan(lp).any()
    assert lp[0, 0] == 0.0 and lp[0, 1] == -1e30
    np.testing.assert_allclose(np.exp(lp[1]).sum(), 1.0, rtol=1e-14)
