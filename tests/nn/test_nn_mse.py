"""mse_forward / mse_backward: the mean over every entry, its gradient (checked numerically),
the unit-variance reading, and refused shapes."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import mse_backward, mse_forward
from minitransformer.gradcheck import check_kernel


def test_gradcheck(any_backend, float64, randn):
    target = randn(3, 5)
    check_kernel(mse_forward, mse_backward, {"pred": randn(3, 5, scale=2.0)}, {"target": target})


def test_loss_is_the_mean_of_the_squared_differences_and_the_gradient_scales_with_dloss(float64):
    pred = np.array([[1.0, -2.0, 0.5], [0.0, 3.0, -1.0]])
    target = np.array([[0.0, -1.0, 0.5], [2.0, 3.0, 1.0]])
    loss, cache = mse_forward(backend.asarray(pred), backend.asarray(target))
    assert float(loss) == pytest.approx(((pred - target) ** 2).mean(), rel=1e-15)
    grad = backend.to_numpy(mse_backward(0.5, cache))
    np.testing.assert_allclose(grad, 0.5 * 2 * (pred - target) / pred.size, rtol=1e-15)


def test_a_constant_zero_prediction_of_unit_variance_targets_scores_about_one(float64):
    target = np.random.default_rng(0).standard_normal((400, 50))
    loss, _ = mse_forward(backend.asarray(np.zeros_like(target)), backend.asarray(target))
    assert abs(float(loss) - 1.0) < 0.02


@pytest.mark.parametrize("pred_shape,target_shape", [((2, 3), (2, 4)), ((6,), (6,)), ((0, 3), (0, 3))])
def test_mismatched_or_empty_shapes_are_refused(pred_shape, target_shape):
    with pytest.raises(ValueError, match="mse_forward: predictions of shape"):
        mse_forward(backend.asarray(np.zeros(pred_shape)), backend.asarray(np.zeros(target_shape)))
