"""attention_forward / attention_backward: gradients under every mask kind, fully
masked rows, extreme logits, causality and permutation properties, shape errors."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend
from minitransformer.functional import (
    attention_backward, attention_forward, causal_mask, combine_masks, padding_mask,
)
from minitransformer.gradcheck import check_kernel

SETTINGS = settings(max_examples=25, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _dev(a):
    return backend.asarray(np.asarray(a))


def _qkv(g, B=2, H=2, Tq=3, Tk=3, Dh=2, Dv=None, scale=1.0):
    Dv = Dh if Dv is None else Dv
    return tuple(_dev(g.standard_normal(s) * scale) for s in [(B, H, Tq, Dh), (B, H, Tk, Dh), (B, H, Tk, Dv)])


def _random_mask(g, shape, fully_masked_rows=()):
    m = g.random(shape) < 0.6
    m[..., 0] |= ~m.any(axis=-1)  # at least one key per row, unless forced below
    for idx in fully_masked_rows:
        m[idx] = False
    return _dev(m)


def _check(q, k, v, **kwargs):
    return check_kernel(attention_forward, attention_backward, {"q": q, "k": k, "v": v}, kwargs)


# -- gradient checks ---------------------------------------------------------------
def test_gradcheck_no_mask(any_backend, float64, host_rng):
    _check(*_qkv(host_rng))


def test_gradcheck_causal(any_backend, float64, host_rng):
    _check(*_qkv(host_rng, Tq=4, Tk=4), mask=causal_mask(4))


def test_gradcheck_causal_rectangular(any_backend, float64, host_rng):
    _check(*_qkv(host_rng, Tq=2, Tk=4), mask=causal_mask(2, 4))


def test_gradcheck_padding(any_backend, float64, host_rng):
    ids = _dev(np.array([[3, 4, 0, 0], [5, 6, 7, 0]]))
    mask = padding_mask(ids, 0)
    assert mask.shape == (2, 1, 1, 4)
    _check(*_qkv(host_rng, Tq=4, Tk=4), mask=mask)


def test_gradcheck_custom_boolean_mask(any_backend, float64, host_rng):
    _check(*_qkv(host_rng, Tq=3, Tk=4), mask=_random_mask(host_rng, (2, 2, 3, 4)))


def test_gradcheck_with_fully_masked_row(any_backend, float64, host_rng):
    mask = _random_mask(host_rng, (2, 2, 3, 3), fully_masked_rows=[(0, 1, 2), (1, 0, 0)])
    _check(*_qkv(host_rng), mask=mask)


def test_gradcheck_cross_attention_shapes(any_backend, float64, host_rng):
    q, k, v = _qkv(host_rng, B=2, H=1, Tq=2, Tk=5, Dh=3, Dv=4)
    ids = _dev(np.array([[1, 2, 3, 0, 0], [1, 2, 3, 4, 5]]))
    out, _ = attention_forward(q, k, v, mask=padding_mask(ids, 0))
    assert out.shape == (2, 1, 2, 4)
    _check(q, k, v, mask=padding_mask(ids, 0))
    _check(q, k, v)


def test_gradcheck_with_dropout_mask_and_scale(any_backend, float64, host_rng):
    keep = host_rng.random((2, 2, 3, 3)) >= 0.3
    dropout_mask = _dev(keep / 0.7)
    _check(*_qkv(host_rng), mask=causal_mask(3), dropout_mask=dropout_mask, scale=0.3)


def test_combined_causal_and_padding_mask(any_backend, float64, host_rng):
    ids = _dev(np.array([[1, 2, 0], [4, 0, 0]]))
    _check(*_qkv(host_rng), mask=combine_masks(causal_mask(3), padding_mask(ids, 0)))


# -- fully masked rows and extreme logits ------------------------------------------
def test_fully_masked_row_gives_exact_zeros_and_no_nan(any_backend, float64, host_rng):
    q, k, v = _qkv(host_rng, Tq=3, Tk=4)
    m = np.ones((2, 2, 3, 4), dtype=bool)
    m[0, 1, 2] = False
    m[1, 0, 0] = False
    out, cache = attention_forward(q, k, v, mask=_dev(m))
    dq, dk, dv, _ = attention_backward(_dev(host_rng.standard_normal((2, 2, 3, 2))), cache)
    out, p, dq = backend.to_numpy(out), backend.to_numpy(cache.p), backend.to_numpy(dq)
    for a in (out, p, dq, backend.to_numpy(dk), backend.to_numpy(dv)):
        assert not np.isnan(a).any()
    for b, h, t in [(0, 1, 2), (1, 0, 0)]:
        assert (out[b, h, t] == 0.0).all()
        assert (dq[b, h, t] == 0.0).all()
        assert (p[b, h, t] == 0.0).all()
    np.testing.assert_allclose(p.sum(-1)[m.any(-1)], 1.0, rtol=1e-14)


def test_masked_keys_get_zero_probability_next_to_huge_logits(any_backend, float64):
    # Dh = 1, scale 1: logits are q * k = +-1e30 on the unmasked keys
    q = _dev(np.full((1, 1, 2, 1), 1e15))
    k = _dev(np.array([1e15, -1e15, 3e14, 1e15]).reshape(1, 1, 4, 1))
    v = _dev(np.arange(8.0).reshape(1, 1, 4, 2))
    m = np.array([[True, True, True, False], [False, True, True, True]])
    out, cache = attention_forward(q, k, v, mask=_dev(m), scale=1.0)
    p = backend.to_numpy(cache.p)[0, 0]
    assert (p[~m] == 0.0).all()
    np.testing.assert_allclose(p.sum(-1), 1.0, rtol=1e-15)
    assert np.isfinite(backend.to_numpy(out)).all()
    np.testing.assert_array_equal(backend.to_numpy(out)[0, 0, 0], [0.0, 1.0])  # all weight on key 0
    grads = attention_backward(_dev(np.ones((1, 1, 2, 2))), cache)[:3]
    assert all(np.isfinite(backend.to_numpy(g)).all() for g in grads)


def test_masked_keys_with_huge_logits_are_ignored(any_backend, float64, host_rng):
    q = _dev(np.ones((1, 1, 2, 1)))
    k = _dev(np.array([0.5, 1e30, -0.5, 1e30]).reshape(1, 1, 4, 1))  # keys 1 and 3 huge, masked
    v = _dev(host_rng.standard_normal((1, 1, 4, 3)))
    m = _dev(np.array([True, False, True, False]))[None, None, None, :]
    out, cache = attention_forward(q, k, v, mask=m, scale=1.0)
    p = backend.to_numpy(cache.p)[0, 0]
    assert (p[:, [1, 3]] == 0.0).all()
    e = np.exp([0.5, -0.5])
    np.testing.assert_allclose(p[:, [0, 2]], np.broadcast_to(e / e.sum(), (2, 2)), rtol=1e-14)
    assert np.isfinite(backend.to_numpy(out)).all()


# -- properties ----------------------------------------------------------------------
dims = st.fixed_dictionaries({
    "B": st.integers(1, 2), "H": st.integers(1, 2), "T": st.integers(2, 5),
    "D": st.integers(1, 4), "seed": st.integers(0, 2**31 - 1),
})


@SETTINGS
@given(d=dims, data=st.data())
def test_causal_outputs_ignore_future_keys_and_values(any_backend, d, data):
    B, H, T, D = d["B"], d["H"], d["T"], d["D"]
    t = data.draw(st.integers(0, T - 2), label="last unchanged position")
    g = np.random.default_rng(d["seed"])
    q, k, v = (g.standard_normal((B, H, T, D)) for _ in range(3))
    k2, v2 = k.copy(), v.copy()
    k2[:, :, t + 1:] = g.standard_normal(k2[:, :, t + 1:].shape) * 100.0
    v2[:, :, t + 1:] = g.standard_normal(v2[:, :, t + 1:].shape) * 100.0
    out1, _ = attention_forward(_dev(q), _dev(k), _dev(v), mask=causal_mask(T))
    out2, _ = attention_forward(_dev(q), _dev(k2), _dev(v2), mask=causal_mask(T))
    np.testing.assert_array_equal(backend.to_numpy(out1)[:, :, :t + 1], backend.to_numpy(out2)[:, :, :t + 1])


@SETTINGS
@given(d=dims)
def test_permutation_equivariance_without_mask(any_backend, d):
    B, H, T, D = d["B"], d["H"], d["T"], d["D"]
    g = np.random.default_rng(d["seed"])
    q, k, v = (g.standard_normal((B, H, T, D)) for _ in range(3))
    perm = g.permutation(T)
    out, _ = attention_forward(_dev(q), _dev(k), _dev(v))
    out_p, _ = attention_forward(_dev(q[:, :, perm]), _dev(k[:, :, perm]), _dev(v[:, :, perm]))
    np.testing.assert_allclose(backend.to_numpy(out_p), backend.to_numpy(out)[:, :, perm], rtol=1e-12, atol=1e-12)
    # permuting only the keys and values together changes nothing at all
    out_kv, _ = attention_forward(_dev(q), _dev(k[:, :, perm]), _dev(v[:, :, perm]))
    np.testing.assert_allclose(backend.to_numpy(out_kv), backend.to_numpy(out), rtol=1e-12, atol=1e-12)


@SETTINGS
@given(d=dims, data=st.data())
def test_no_nan_with_fully_masked_rows(any_backend, d, data):
    B, H, T, D = d["B"], d["H"], d["T"], d["D"]
    g = np.random.default_rng(d["seed"])
    m = g.random((B, H, T, T)) < data.draw(st.floats(0.0, 1.0), label="keep probability")
    dead = g.random((B, H, T)) < 0.3
    m[dead] = False
    q, k, v = (_dev(g.standard_normal((B, H, T, D)) * 10.0) for _ in range(3))
    out, cache = attention_forward(q, k, v, mask=_dev(m))
    grads = attention_backward(_dev(g.standard_normal((B, H, T, D))), cache)[:3]
    arrays = [backend.to_numpy(a) for a in (out, cache.p, *grads)]
    assert all(np.isfinite(a).all() for a in arrays)
    empty = ~m.any(-1)
    assert (arrays[0][empty] == 0.0).all() and (arrays[2][empty] == 0.0).all()


# -- validation ----------------------------------------------------------------------
def test_mask_of_wrong_shape_raises(any_backend, float64, host_rng):
    q, k, v = _qkv(host_rng, Tq=3, Tk=4)
    with pytest.raises(ValueError, match=r"mask of shape \(2, 2, 3, 5\) does not broadcast.*\(2, 2, 3, 4\)"):
        attention_forward(q, k, v, mask=_dev(np.ones((2, 2, 3, 5), dtype=bool)))
    with pytest.raises(ValueError, match="does not broadcast"):
        attention_forward(q, k, v, mask=_dev(np.ones((1, 2, 2, 3, 4), dtype=bool)))


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_non_boolean_mask_raises(any_backend, float64, host_rng, dtype):
    q, k, v = _qkv(host_rng)
    with pytest.raises(ValueError, match="mask must be boolean"):
        attention_forward(q, k, v, mask=_dev(np.ones((3, 3), dtype=dtype)))


@pytest.mark.parametrize("shapes", [
    [(2, 2, 3, 4), (2, 2, 3, 5), (2, 2, 3, 4)],   # q and k disagree on Dh
    [(2, 2, 3, 4), (2, 2, 3, 4), (2, 2, 2, 4)],   # k and v disagree on Tk
    [(2, 2, 3, 4), (1, 2, 3, 4), (1, 2, 3, 4)],   # batch mismatch
])
def test_mismatched_qkv_raise(any_backend, float64, shapes):
    q, k, v = (_dev(np.zeros(s)) for s in shapes)
    with pytest.raises(ValueError, match=r"expected q \(B, H, Tq, Dh\), k \(B, H, Tk, Dh\), v \(B, H, Tk, Dv\)"):
        attention_forward(q, k, v)


def test_non_4d_raises(any_backend, float64):
    x = _dev(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="must be 4-D"):
        attention_forward(x, x, x)
