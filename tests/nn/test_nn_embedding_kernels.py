"""embedding_forward / embedding_backward: lookup, scatter-add, id validation."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import embedding_backward, embedding_forward
from minitransformer.gradcheck import check_kernel


def _ids(a):
    return backend.asarray(np.array(a, dtype=np.int64))


def test_forward_is_row_lookup(any_backend, float64, randn):
    W, ids = randn(5, 3), _ids([[0, 4, 4], [2, 2, 1]])
    out, _ = embedding_forward(ids, W)
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(backend.to_numpy(out), backend.to_numpy(W)[backend.to_numpy(ids)])


def test_gradcheck_with_repeated_ids(any_backend, float64, randn):
    ids = _ids([[1, 3, 1], [1, 0, 3]])  # id 1 three times, id 3 twice, ids 2 and 4 unused
    check_kernel(embedding_forward, embedding_backward, {"ids": ids, "W": randn(5, 2)})


def test_repeated_ids_sum(any_backend, float64, randn):
    ids, W = _ids([2, 2, 2, 0]), randn(4, 3)
    _, cache = embedding_forward(ids, W)
    dout = randn(4, 3)
    dW = backend.to_numpy(embedding_backward(dout, cache))
    d = backend.to_numpy(dout)
    np.testing.assert_allclose(dW[2], d[0] + d[1] + d[2], rtol=1e-14)
    np.testing.assert_array_equal(dW[0], d[3])
    np.testing.assert_array_equal(dW[1], 0.0)
    np.testing.assert_array_equal(dW[3], 0.0)


@pytest.mark.parametrize("bad", [7, 5, -1])
def test_out_of_range_id_raises_naming_id_and_vocab(float64, randn, bad):
    """On NumPy, where reading the ids costs nothing (a GPU checks the host batch instead)."""
    with pytest.raises(ValueError, match=rf"token id {bad} .*vocabulary of size 5"):
        embedding_forward(_ids([[0, bad]]), randn(5, 2))


@pytest.mark.parametrize("bad", [7, -1])
def test_host_ids_are_checked_before_the_copy(any_backend, bad):
    from minitransformer.functional import ids_to_device
    with pytest.raises(ValueError, match=rf"batch: token id {bad} is out of range .*size 5"):
        ids_to_device(np.array([[0, bad]]), 5)
    ids = ids_to_device(np.array([[0, 4]]), 5)
    assert backend.is_device_array(ids) and backend.to_numpy(ids).tolist() == [[0, 4]]


def test_float_ids_raise(any_backend, float64, randn):
    with pytest.raises(ValueError, match="integer array.*float64"):
        embedding_forward(backend.asarray(np.array([0.0, 1.0])), randn(5, 2))


@pytest.mark.parametrize("n", [0, 1, 7, 500])
def test_scatter_add_matches_add_at(any_backend, float64, n):
    """backend.scatter_add (add.at of the active backend) sums repeated rows like np.add.at."""
    rng = np.random.default_rng(n)
    ids = rng.integers(0, 9, size=n)  # (n,) with repeats, some rows never hit
    vals = rng.standard_normal((n, 4))  # (n, 4)
    start = rng.standard_normal((9, 4))  # (9, 4) a non-zero target: scatter_add adds to it
    want = start.copy()
    np.add.at(want, ids, vals)
    got = backend.asarray(start)
    backend.scatter_add(got, backend.asarray(ids), backend.asarray(vals))
    np.testing.assert_allclose(backend.to_numpy(got), want, rtol=1e-13, atol=1e-13)
