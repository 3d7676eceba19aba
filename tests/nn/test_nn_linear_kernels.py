"""linear_forward / linear_backward: values, gradients, shape errors."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import linear_backward, linear_forward
from minitransformer.gradcheck import check_kernel


def test_forward_matches_matmul_plus_bias(any_backend, float64, randn):
    x, W, b = randn(2, 3, 4), randn(4, 5), randn(5)
    y, _ = linear_forward(x, W, b)
    expected = backend.to_numpy(x) @ backend.to_numpy(W) + backend.to_numpy(b)
    np.testing.assert_allclose(backend.to_numpy(y), expected, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("x_shape", [(3,), (2, 3), (2, 2, 3)])
def test_gradcheck_with_bias(any_backend, float64, randn, x_shape):
    check_kernel(linear_forward, linear_backward, {"x": randn(*x_shape), "W": randn(3, 4), "b": randn(4)})


def test_gradcheck_without_bias(any_backend, float64, randn):
    report = check_kernel(linear_forward, linear_backward, {"x": randn(2, 3), "W": randn(3, 2)})
    assert [c.name for c in report.checks] == ["x", "W"]


def test_no_bias_gives_none_db(any_backend, float64, randn):
    x, W = randn(2, 3), randn(3, 2)
    y, cache = linear_forward(x, W)
    dx, dW, db = linear_backward(randn(2, 2), cache)
    assert db is None and dx.shape == (2, 3) and dW.shape == (3, 2)


def test_wrong_d_in_raises_naming_the_expected_size(any_backend, float64, randn):
    with pytest.raises(ValueError, match=r"last dimension 5.*D_in=3"):
        linear_forward(randn(2, 5), randn(3, 4), randn(4))
