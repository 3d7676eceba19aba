"""Inverted dropout: identity at p=0, fixed masks, expectation, invalid p."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.backend import RNG
from minitransformer.functional import dropout_backward, dropout_forward, make_dropout_mask
from minitransformer.gradcheck import check_kernel


def test_p_zero_is_identity(any_backend, float64, randn):
    x = randn(3, 4)
    y, cache = dropout_forward(x, 0.0, rng=RNG(0))
    np.testing.assert_array_equal(backend.to_numpy(y), backend.to_numpy(x))
    dy = randn(3, 4)
    np.testing.assert_array_equal(backend.to_numpy(dropout_backward(dy, cache)), backend.to_numpy(dy))


def test_fixed_mask_gives_deterministic_gradients(any_backend, float64, randn):
    x, dy = randn(4, 5), randn(4, 5)
    mask = make_dropout_mask((4, 5), 0.4, RNG(3), np.float64)
    grads = []
    for _ in range(2):
        y, cache = dropout_forward(x, 0.4, mask=mask)
        grads.append(backend.to_numpy(dropout_backward(dy, cache)))
        np.testing.assert_array_equal(backend.to_numpy(y), backend.to_numpy(x * mask))
    np.testing.assert_array_equal(grads[0], grads[1])
    np.testing.assert_array_equal(grads[0], backend.to_numpy(dy * mask))


def test_gradcheck_with_fixed_mask(any_backend, float64, randn):
    mask = make_dropout_mask((3, 4), 0.5, RNG(1), np.float64)
    check_kernel(dropout_forward, dropout_backward, {"x": randn(3, 4)}, {"p": 0.5, "mask": mask})


def test_mask_values_and_expectation(any_backend, float64):
    p = 0.3
    mask = backend.to_numpy(make_dropout_mask((200_000,), p, RNG(7), np.float64))
    assert set(np.unique(mask)) <= {0.0, 1.0 / (1.0 - p)}
    assert abs((mask > 0).mean() - (1 - p)) < 0.01
    x = backend.asarray(np.full(200_000, 2.0))
    y, _ = dropout_forward(x, p, rng=RNG(8))
    assert abs(float(y.mean()) - 2.0) < 0.02  # E[y] = x


def test_same_seed_same_mask(any_backend, float64, randn):
    x = randn(6, 6)
    y1, _ = dropout_forward(x, 0.5, rng=RNG(11))
    y2, _ = dropout_forward(x, 0.5, rng=RNG(11))
    np.testing.assert_array_equal(backend.to_numpy(y1), backend.to_numpy(y2))


def test_keeps_float32(any_backend):
    x = backend.asarray(np.ones((4, 4), dtype=np.float32))
    y, mask = dropout_forward(x, 0.5, rng=RNG(0))
    assert y.dtype == np.float32 and mask.dtype == np.float32


@pytest.mark.parametrize("p", [1.0, 1.5, -0.1, float("nan")])
def test_invalid_p_raises(any_backend, float64, randn, p):
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        dropout_forward(randn(2, 2), p, rng=RNG(0))
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        make_dropout_mask((2, 2), p, RNG(0), np.float64)


def test_missing_rng_and_wrong_mask_shape_raise(any_backend, float64, randn):
    with pytest.raises(ValueError, match="rng"):
        dropout_forward(randn(2, 2), 0.5)
    with pytest.raises(ValueError, match=r"mask shape \(3,\) != input shape \(2, 2\)"):
        dropout_forward(randn(2, 2), 0.5, mask=randn(3))
