"""GELU (exact and tanh) and ReLU: values against math.erf, gradients, extreme inputs."""
import math

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import gelu_backward, gelu_forward, relu_backward, relu_forward
from minitransformer.gradcheck import check_kernel

LARGE = np.array([-1e4, -1e3, -100.0, -40.0, -38.5, -20.0, 20.0, 38.5, 40.0, 100.0, 1e3, 1e4, 1e6])


def _gelu_exact_ref(x):
    return np.array([v * 0.5 * (1.0 + math.erf(v / math.sqrt(2.0))) for v in x])


def _gelu_exact_grad_ref(x):
    return np.array([0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
                     + v * math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi) for v in x])


def _gelu_tanh_ref(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def test_exact_gelu_matches_erf_on_dense_grid(any_backend):
    x = np.concatenate([np.linspace(-10.0, 10.0, 20_001), LARGE])
    y, _ = gelu_forward(backend.asarray(x), approximate="none")
    err = np.abs(backend.to_numpy(y) - _gelu_exact_ref(x))
    assert err.max() <= 1e-6, f"max |gelu - ref| = {err.max():.3e} at x = {x[err.argmax()]}"


def test_exact_gelu_derivative_matches_closed_form(any_backend):
    x = np.linspace(-10.0, 10.0, 4_001)
    _, cache = gelu_forward(backend.asarray(x), approximate="none")
    dx = backend.to_numpy(gelu_backward(backend.asarray(np.ones_like(x)), cache))
    err = np.abs(dx - _gelu_exact_grad_ref(x))
    assert err.max() <= 1e-6, f"max |gelu' - ref| = {err.max():.3e} at x = {x[err.argmax()]}"


def test_tanh_gelu_matches_formula(any_backend):
    x = np.concatenate([np.linspace(-10.0, 10.0, 2_001), LARGE[np.abs(LARGE) <= 1e4]])
    y, _ = gelu_forward(backend.asarray(x), approximate="tanh")
    np.testing.assert_allclose(backend.to_numpy(y), _gelu_tanh_ref(x), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradcheck(any_backend, float64, randn, approximate):
    x = backend.asarray(np.array([[-3.0, -1.2, -0.3, 0.0], [0.2, 0.9, 2.5, 4.0]])) + randn(2, 4, scale=0.01)
    check_kernel(gelu_forward, gelu_backward, {"x": x}, {"approximate": approximate})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gelu_extremes_finite_with_correct_limits(any_backend, approximate, dtype):
    mags = np.array([10.0, 50.0, 100.0, 1e3, 1e4])
    x = np.concatenate([-mags, mags]).astype(dtype)
    y, cache = gelu_forward(backend.asarray(x), approximate=approximate)
    dx = backend.to_numpy(gelu_backward(backend.asarray(np.ones_like(x)), cache))
    y = backend.to_numpy(y)
    assert y.dtype == dtype and dx.dtype == dtype
    assert np.isfinite(y).all() and np.isfinite(dx).all()
    np.testing.assert_allclose(dx[x < 0], 0.0, atol=1e-6)  # GELU'(-inf) = 0
    np.testing.assert_allclose(dx[x > 0], 1.0, atol=1e-6)  # GELU'(+inf) = 1
    np.testing.assert_allclose(y[x < 0], 0.0, atol=1e-6)
    np.testing.assert_allclose(y[x > 0], x[x > 0], rtol=1e-6)


def test_gelu_rejects_unknown_form(any_backend, float64, randn):
    with pytest.raises(ValueError, match="'none' or 'tanh'"):
        gelu_forward(randn(2), approximate="sigmoid")


def test_relu_values_and_gradcheck(any_backend, float64):
    x = backend.asarray(np.array([[-2.0, -0.5, 0.3], [1.5, -1.0, 0.7]]))  # away from the kink at 0
    y, _ = relu_forward(x)
    np.testing.assert_array_equal(backend.to_numpy(y), np.maximum(backend.to_numpy(x), 0.0))
    check_kernel(relu_forward, relu_backward, {"x": x})


def test_relu_gradient_at_zero_is_zero(any_backend, float64):
    _, cache = relu_forward(backend.asarray(np.array([0.0, 1.0])))
    np.testing.assert_array_equal(backend.to_numpy(relu_backward(backend.asarray(np.ones(2)), cache)), [0.0, 1.0])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_propagates_nan_and_inf_without_raising(any_backend, approximate):
    # A diverging model feeds NaN into GELU; the trainer must see NaN, not an IndexError.
    x = backend.asarray(np.array([np.nan, 1.0, -np.inf, np.inf, -2.0, np.nan], dtype=np.float32))
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0 inside tanh GELU is expected here
        y, cache = gelu_forward(x, approximate=approximate)
        dx = gelu_backward(backend.asarray(np.ones(6, np.float32)), cache)
    y, dx = backend.to_numpy(y), backend.to_numpy(dx)
    assert np.isnan(y[[0, 5]]).all() and np.isnan(dx[[0, 5]]).all(), f"NaN must stay NaN, got y={y}, dx={dx}"
    assert np.isfinite(y[[1, 4]]).all() and y[3] == np.inf, f"got y={y}"
