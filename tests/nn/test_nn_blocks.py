"""EncoderBlock and DecoderBlock: gradient checks for post- and pre-LN, with and without
cross-attention; permutation equivariance; repeatable and accumulating backward passes."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer import backend
from minitransformer.functional import causal_mask, combine_masks, padding_mask
from minitransformer.gradcheck import check_module
from minitransformer.nn import CausalBlock, DecoderBlock, EncoderBlock, Module
from nn_helpers import opts  # noqa: E402

SETTINGS = settings(max_examples=20, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def _randn(*shape, seed=0, scale=1.0):
    return backend.asarray(np.random.default_rng(seed).standard_normal(shape) * scale)


def _dev(a):
    return backend.asarray(np.asarray(a))


def _host(a):
    return backend.to_numpy(a)


def _randomize(module, seed=1, scale=0.2):
    g = np.random.default_rng(seed)
    for _, p in module.named_parameters():
        p.data = p.data + backend.asarray(g.standard_normal(tuple(p.shape)) * scale)


def _how():
    """Element-wise under NumPy. The strict backend runs the very same NumPy arithmetic
    (it only refuses host conversions), so there a cheaper directional check proves the
    code path without repeating the element-by-element work."""
    return {} if backend.name() == "numpy" else dict(mode="directional", n_directions=2)


def _grads(module):
    return {n: _host(p.grad).copy() for n, p in module.named_parameters()}


BLOCK_KW = dict(d_model=4, n_heads=2, d_ff=6)


# -- gradient checks ---------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_block_gradcheck(any_backend, float64, norm, activation):
    blk = EncoderBlock(opts(**BLOCK_KW, norm=norm, activation=activation), rng=backend.RNG(1))
    _randomize(blk)
    ids = _dev(np.array([[4, 4, 4], [4, 4, 0]]))
    report = check_module(blk, _randn(2, 3, 4), kwargs={"mask": padding_mask(ids, 0)},
                          **_how())
    assert len(report.checks) == 1 + len(blk.parameters()) == 1 + 12


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_encoder_block_wide_heads(any_backend, float64, norm):
    blk = EncoderBlock(opts(**BLOCK_KW, d_head=4, norm=norm, activation="relu"), rng=backend.RNG(2))
    _randomize(blk)
    check_module(blk, _randn(2, 3, 4), **_how())


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_block_without_cross_attention(any_backend, float64, norm):
    blk = CausalBlock(opts(**BLOCK_KW, norm=norm, activation="gelu_tanh"), rng=backend.RNG(3))
    assert not hasattr(blk, "cross")
    _randomize(blk)
    check_module(blk, _randn(2, 3, 4), kwargs={"mask": causal_mask(3)}, **_how())


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_block_with_cross_attention(any_backend, float64, norm):
    blk = DecoderBlock(opts(**BLOCK_KW, norm=norm, activation="relu"), rng=backend.RNG(4))
    _randomize(blk)
    names = [n for n, _ in blk.named_parameters()]
    assert "cross.qkv.weight" in names and "ln_cross.weight" in names
    tgt = _dev(np.array([[5, 5, 5], [5, 5, 0]]))
    src = _dev(np.array([[5, 5, 5, 0], [5, 0, 0, 0]]))
    # forward(x, mask, context, context_mask): the dict is passed positionally, and only
    # the float arrays (x, context) are differentiated; backward returns (dx, dcontext)
    report = check_module(
        blk, {"x": _randn(2, 3, 4), "mask": combine_masks(causal_mask(3), padding_mask(tgt, 0)),
              "context": _randn(2, 4, 4, seed=1)},
        kwargs={"context_mask": padding_mask(src, 0)}, **_how())
    assert {"x", "context"} <= {c.name for c in report.checks}
    assert len(report.checks) == 2 + 18


def test_decoder_block_wide_heads_cross(any_backend, float64):
    blk = DecoderBlock(opts(**BLOCK_KW, d_head=4, norm="pre", activation="relu"), rng=backend.RNG(5))
    _randomize(blk)
    check_module(blk, {"x": _randn(1, 2, 4), "mask": causal_mask(2), "context": _randn(1, 3, 4, seed=1)},
                 **_how())


def test_decoder_block_context_consistency():
    blk = DecoderBlock(opts(**BLOCK_KW))
    with pytest.raises(ValueError, match="pass context"):
        blk(np.zeros((1, 2, 4)))
    blk2 = CausalBlock(opts(**BLOCK_KW))
    with pytest.raises(ValueError, match="CausalBlock has no cross-attention"):
        blk2(np.zeros((1, 2, 4)), context=np.zeros((1, 2, 4)))


class _Rewound(Module):
    """Rewinds the block's shared random stream before each forward: every forward of a
    training-mode gradient check then draws the same dropout masks."""

    def __init__(self, inner):
        self.inner = inner

    def forward(self, *args, **kwargs):
        self.inner.attn.rng.counter = 0
        return self.inner.forward(*args, **kwargs)

    def backward(self, dout):
        return self.inner.backward(dout)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_decoder_block_gradcheck_with_all_dropouts_in_training_mode(any_backend, float64, norm):
    rng = backend.RNG(8)  # one stream for every dropout in the block, as the models do
    blk = DecoderBlock(opts(**BLOCK_KW, norm=norm, activation="relu", attn_dropout=0.3, resid_dropout=0.3, ff_dropout=0.3), rng=rng)
    _randomize(blk)
    check_module(_Rewound(blk), {"x": _randn(2, 3, 4), "mask": causal_mask(3),
                                 "context": _randn(2, 4, 4, seed=1)}, eval_mode=False, **_how())


# -- properties --------------------------------------------------------------------
@SETTINGS
@given(B=st.integers(1, 3), T=st.integers(1, 6), Dh=st.integers(1, 3), H=st.integers(1, 3),
       norm=st.sampled_from(["post", "pre"]), seed=st.integers(0, 2**16))
def test_encoder_block_is_permutation_equivariant(any_backend, float64, B, T, Dh, H, norm, seed):
    D = H * Dh
    blk = EncoderBlock(opts(D, H, 2 * D + 1, norm=norm), rng=backend.RNG(seed % 11))
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, T, D))
    perm = g.permutation(T)
    y = _host(blk(_dev(x)))
    y_perm = _host(blk(_dev(x[:, perm])))
    np.testing.assert_allclose(y_perm, y[:, perm], rtol=1e-9, atol=1e-10)


@SETTINGS
@given(B=st.integers(1, 2), T=st.integers(2, 6), Dh=st.integers(1, 3), H=st.integers(1, 2),
       seed=st.integers(0, 2**16), cut=st.integers(0, 4))
def test_decoder_block_is_causal(any_backend, float64, B, T, Dh, H, seed, cut):
    D = H * Dh
    cut = cut % (T - 1)
    blk = CausalBlock(opts(D, H, 3), rng=backend.RNG(seed % 5))
    g = np.random.default_rng(seed)
    x = g.standard_normal((B, T, D))
    x2 = x.copy()
    x2[:, cut + 1:] += g.standard_normal((B, T - cut - 1, D))
    y = _host(blk(_dev(x), mask=causal_mask(T)))
    y2 = _host(blk(_dev(x2), mask=causal_mask(T)))
    np.testing.assert_allclose(y2[:, :cut + 1], y[:, :cut + 1], rtol=1e-12, atol=1e-12)


# -- repeatable backward, accumulation ------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_block_backward_twice_identical_and_accumulates(any_backend, float64, norm):
    blk = DecoderBlock(opts(**BLOCK_KW, norm=norm), rng=backend.RNG(6))
    _randomize(blk)
    x, ctx = _randn(2, 3, 4), _randn(2, 4, 4, seed=1)
    dy = _randn(2, 3, 4, seed=2)
    dy_before = _host(dy).copy()
    blk(x, mask=causal_mask(3), context=ctx)
    dx1, dctx1 = (_host(a) for a in blk.backward(dy))
    g1 = _grads(blk)
    assert all(np.any(g != 0) for g in g1.values())
    blk.zero_grad()
    assert all(np.all(_host(p.grad) == 0) for p in blk.parameters())
    dx2, dctx2 = (_host(a) for a in blk.backward(dy))  # same cache, same dout
    g2 = _grads(blk)
    np.testing.assert_array_equal(_host(dy), dy_before)  # backward did not overwrite dout
    np.testing.assert_array_equal(dx1, dx2)
    np.testing.assert_array_equal(dctx1, dctx2)
    for n in g1:
        np.testing.assert_array_equal(g1[n], g2[n], err_msg=n)
    blk.backward(dy)  # no zero_grad: gradients add up
    for n, g in _grads(blk).items():
        np.testing.assert_allclose(g, 2.0 * g1[n], rtol=1e-13, atol=1e-15, err_msg=n)


# -- errors ------------------------------------------------------------------------
@pytest.mark.parametrize("norm", ["post", "pre"])
def test_blocks_reject_wrong_d_model(any_backend, float64, norm):
    enc = EncoderBlock(opts(**BLOCK_KW, norm=norm))
    dec = DecoderBlock(opts(**BLOCK_KW, norm=norm))
    with pytest.raises(ValueError, match=r"expected 4|d_model=4"):
        enc(_randn(2, 3, 5))
    with pytest.raises(ValueError, match=r"expected 4|d_model=4"):
        dec(_randn(2, 3, 5), context=_randn(2, 3, 4))
    with pytest.raises(ValueError, match=r"context must have shape \(B, T, d_model=4\)"):
        dec(_randn(2, 3, 4), context=_randn(2, 3, 6))


def test_blocks_reject_wrong_mask_shape(any_backend, float64):
    enc = EncoderBlock(opts(**BLOCK_KW))
    with pytest.raises(ValueError, match="does not broadcast"):
        enc(_randn(2, 3, 4), mask=causal_mask(2))
    dec = DecoderBlock(opts(**BLOCK_KW))
    with pytest.raises(ValueError, match="does not broadcast"):
        dec(_randn(2, 3, 4), mask=causal_mask(3), context=_randn(2, 5, 4),
            context_mask=_dev(np.ones((2, 1, 1, 4), dtype=bool)))


def test_block_rejects_unknown_norm():
    with pytest.raises(ValueError, match=r"norm must be one of \['post', 'pre'\], got 'sandwich'"):
        EncoderBlock(opts(**BLOCK_KW, norm="sandwich"))


@pytest.mark.parametrize("cls", [EncoderBlock, DecoderBlock])
def test_block_backward_before_forward(cls):
    with pytest.raises(RuntimeError, match="before forward"):
        cls(opts(**BLOCK_KW)).backward(np.zeros((1, 2, 4)))
