"""layernorm_forward / layernorm_backward against a direct formula."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import layernorm_backward, layernorm_forward
from minitransformer.gradcheck import check_kernel


def _direct(x, w, b, eps):
    """(x - mean) / sqrt(biased var + eps) * w + b, on the host."""
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) ** 2).sum(axis=-1, keepdims=True) / x.shape[-1]  # biased: divide by D
    return (x - mu) / np.sqrt(var + eps) * w + b


@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_forward_matches_direct_formula(any_backend, float64, randn, eps):
    x, w, b = randn(2, 3, 4, scale=3.0), randn(4), randn(4)
    y, _ = layernorm_forward(x, w, b, eps=eps)
    h = [backend.to_numpy(a) for a in (x, w, b)]
    np.testing.assert_allclose(backend.to_numpy(y), _direct(*h, eps), rtol=1e-12, atol=1e-12)


def test_variance_is_biased_and_eps_inside_sqrt(any_backend, float64):
    # one row with D = 2: values -1, 1 -> biased var 1, unbiased var 2
    x = backend.asarray(np.array([[-1.0, 1.0]]))
    w, b = backend.asarray(np.ones(2)), backend.asarray(np.zeros(2))
    y, _ = layernorm_forward(x, w, b, eps=3.0)
    # biased + eps inside: 1 / sqrt(1 + 3) = 0.5 (unbiased would give 1/sqrt(5);
    # eps outside the sqrt would give 1/(1 + 3) = 0.25)
    np.testing.assert_allclose(backend.to_numpy(y), [[-0.5, 0.5]], rtol=1e-15)


def test_constant_row_is_finite(any_backend, float64, randn):
    x = backend.asarray(np.full((2, 4), 7.0))
    b = randn(4)
    y, cache = layernorm_forward(x, randn(4), b)
    np.testing.assert_allclose(backend.to_numpy(y), np.broadcast_to(backend.to_numpy(b), (2, 4)), atol=1e-12)
    assert all(np.isfinite(backend.to_numpy(g)).all() for g in layernorm_backward(randn(2, 4), cache))


@pytest.mark.parametrize("shape,eps", [((3, 4), 1e-5), ((2, 2, 5), 0.1), ((1, 3), 1e-5)])
def test_gradcheck(any_backend, float64, randn, shape, eps):
    D = shape[-1]
    check_kernel(layernorm_forward, layernorm_backward,
                 {"x": randn(*shape, scale=2.0), "w": randn(D), "b": randn(D)}, {"eps": eps})


def test_wrong_feature_size_raises(any_backend, float64, randn):
    with pytest.raises(ValueError, match="last dimension 3, expected 4"):
        layernorm_forward(randn(2, 3), randn(4), randn(4))
