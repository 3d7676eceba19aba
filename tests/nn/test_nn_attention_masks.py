"""causal_mask, padding_mask, combine_masks."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.functional import causal_mask, combine_masks, padding_mask


@pytest.mark.parametrize("T", [1, 2, 5])
def test_causal_square_is_lower_triangle(any_backend, T):
    m = causal_mask(T)
    assert m.dtype == bool and m.shape == (T, T)
    np.testing.assert_array_equal(backend.to_numpy(m), np.tril(np.ones((T, T), dtype=bool)))


@pytest.mark.parametrize("Tq,Tk", [(1, 4), (2, 5), (3, 3)])
def test_causal_rectangular_is_bottom_rows(any_backend, Tq, Tk):
    m = causal_mask(Tq, Tk)
    assert m.shape == (Tq, Tk)
    full = np.tril(np.ones((Tk, Tk), dtype=bool))
    np.testing.assert_array_equal(backend.to_numpy(m), full[Tk - Tq:])
    assert backend.to_numpy(m)[-1].all()  # the newest query sees every key


def test_causal_rejects_tk_smaller_than_tq(any_backend):
    with pytest.raises(ValueError, match="Tk=2 must be >= Tq=3"):
        causal_mask(3, 2)


def test_padding_mask_shape_and_values(any_backend):
    ids = backend.asarray(np.array([[5, 6, 0, 0], [7, 0, 8, 9]]))
    m = padding_mask(ids, pad_id=0)
    assert m.shape == (2, 1, 1, 4) and m.dtype == bool
    np.testing.assert_array_equal(
        backend.to_numpy(m)[:, 0, 0], [[True, True, False, False], [True, False, True, True]])


def test_padding_mask_needs_2d_ids(any_backend):
    with pytest.raises(ValueError, match=r"shape \(B, T\)"):
        padding_mask(backend.asarray(np.zeros(4, dtype=np.int64)), 0)


def test_combine_masks_with_none(any_backend):
    assert combine_masks() is None
    assert combine_masks(None, None) is None
    c = causal_mask(3)
    np.testing.assert_array_equal(backend.to_numpy(combine_masks(None, c, None)), backend.to_numpy(c))


def test_combine_causal_and_padding_broadcasts_to_b1tt(any_backend):
    ids = backend.asarray(np.array([[1, 2, 0], [3, 0, 0]]))
    c, p = causal_mask(3), padding_mask(ids, 0)
    m = combine_masks(c, None, p)
    assert m.shape == (2, 1, 3, 3)
    expected = backend.to_numpy(c)[None, None] & backend.to_numpy(p)
    np.testing.assert_array_equal(backend.to_numpy(m), expected)
