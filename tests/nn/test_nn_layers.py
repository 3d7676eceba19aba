"""Small layers: Linear, Embedding, positions, LayerNorm, activations, Dropout,
FeedForward. Every one passes an element-wise float64 gradient check (input
gradients and every parameter) under the numpy and strict backends."""
import math

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.gradcheck import check_module
from minitransformer.nn import (
    GELU, Dropout, Embedding, FeedForward, LayerNorm, Linear, Module, PositionalEmbedding, ReLU,
    SinusoidalPositionalEncoding,
)
from nn_helpers import opts  # noqa: E402


def _randn(*shape, seed=0, scale=1.0):
    return backend.asarray(np.random.default_rng(seed).standard_normal(shape) * scale)


def _ids(a):
    return backend.asarray(np.asarray(a, dtype=np.int64))


def _host(a):
    return backend.to_numpy(a)


def _randomize(module, seed=1, scale=0.5):
    """Move every parameter away from its (often symmetric) initial value."""
    g = np.random.default_rng(seed)
    for _, p in module.named_parameters():
        p.data = p.data + backend.asarray(g.standard_normal(tuple(p.shape)) * scale)


# -- Linear ------------------------------------------------------------------------
@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradcheck(any_backend, float64, bias):
    layer = Linear(3, 4, bias=bias)
    _randomize(layer)
    names = [n for n, _ in layer.named_parameters()]
    assert names == (["weight", "bias"] if bias else ["weight"])
    report = check_module(layer, _randn(2, 2, 3))
    checked = {c.name for c in report.checks}
    assert {"input", "weight"} <= checked and (("bias" in checked) == bias)


def test_linear_init_shapes_and_dtype(any_backend, float64):
    layer = Linear(5, 7)
    assert layer.weight.shape == (5, 7) and layer.bias.shape == (7,)
    assert layer.weight.data.dtype == np.float64
    w = _host(layer.weight.data)
    assert np.all(np.abs(w) <= 1.0 / math.sqrt(5)) and np.all(_host(layer.bias.data) == 0)
    assert backend.is_device_array(layer.weight.data)


# -- Embedding ---------------------------------------------------------------------
def test_embedding_gradcheck_with_repeated_ids(any_backend, float64):
    emb = Embedding(5, 3, init_std=1.0)
    ids = _ids([[1, 3, 1, 1], [4, 1, 0, 3]])  # 1 repeats within and across rows
    check_module(emb, ids)
    # the scatter-add sums repeated ids: row 1 gets four contributions
    emb.zero_grad()
    emb.forward(ids)
    emb.backward(backend.asarray(np.ones((2, 4, 3))))
    counts = np.bincount(np.array([1, 3, 1, 1, 4, 1, 0, 3]), minlength=5)
    np.testing.assert_array_equal(_host(emb.weight.grad), np.repeat(counts[:, None], 3, axis=1))


def test_embedding_lookup_values(any_backend, float64):
    emb = Embedding(6, 2, init_std=1.0)
    ids = _ids([[5, 0], [2, 2]])
    out = _host(emb(ids))
    W = _host(emb.weight.data)
    np.testing.assert_array_equal(out, W[[[5, 0], [2, 2]]])


# -- positions ---------------------------------------------------------------------
@pytest.mark.parametrize("offset", [0, 3])
def test_positional_embedding_gradcheck_with_offset(any_backend, float64, offset):
    pe = PositionalEmbedding(8, 3, init_std=1.0)
    report = check_module(pe, (4,), kwargs={"offset": offset})
    assert [c.name for c in report.checks] == ["weight"]
    # only rows offset .. offset+3 receive gradient
    pe.zero_grad()
    out = pe(4, offset=offset)
    np.testing.assert_array_equal(_host(out)[0], _host(pe.weight.data)[offset:offset + 4])
    g = np.random.default_rng(0).standard_normal((3, 4, 3))  # a batch of 3: the gradient sums over it
    pe.backward(backend.asarray(g))
    expected = np.zeros((8, 3))
    expected[offset:offset + 4] = g.sum(axis=0)
    np.testing.assert_allclose(_host(pe.weight.grad), expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("d", [6, 7, 1])
def test_sinusoidal_matches_formula_including_odd_width(any_backend, float64, d):
    max_len = 9
    enc = SinusoidalPositionalEncoding(max_len, d)
    assert list(enc.named_parameters()) == [] and enc.num_parameters() == 0
    table = _host(enc(max_len))[0]
    expected = np.zeros((max_len, d))
    for t in range(max_len):
        for j in range(d):
            i2 = j - (j % 2)  # the "2i" of the pair this column belongs to
            angle = t / 10000.0 ** (i2 / d)
            expected[t, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    np.testing.assert_allclose(table, expected, rtol=0, atol=1e-12)
    # with an offset: the rows offset .. offset+T-1
    np.testing.assert_allclose(_host(enc(3, offset=5))[0], expected[5:8], rtol=0, atol=1e-12)
    assert enc.backward(backend.asarray(np.ones((1, 3, d)))) is None


def test_sinusoidal_follows_default_dtype(any_backend):
    assert SinusoidalPositionalEncoding(4, 4).table.dtype == np.float32
    with backend.dtype_scope("float64"):
        assert SinusoidalPositionalEncoding(4, 4).table.dtype == np.float64


# -- LayerNorm ---------------------------------------------------------------------
def test_layernorm_init_and_gradcheck(any_backend, float64):
    ln = LayerNorm(4)
    np.testing.assert_array_equal(_host(ln.weight.data), np.ones(4))
    np.testing.assert_array_equal(_host(ln.bias.data), np.zeros(4))
    x = _randn(2, 3, 4, scale=2.0) + 1.0
    y = _host(ln(x))  # weight 1, bias 0: zero mean, unit (biased) variance per row
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1.0, rtol=1e-4)
    _randomize(ln)
    check_module(ln, x)


# -- activations -------------------------------------------------------------------
@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradcheck(any_backend, float64, approximate):
    x = _randn(2, 5, scale=2.0)
    report = check_module(GELU(approximate), x)
    assert [c.name for c in report.checks] == ["input"]


def test_gelu_forms_differ_slightly_and_reject_unknown(any_backend, float64):
    x = backend.asarray(np.linspace(-3, 3, 13))
    a, b = _host(GELU("none")(x)), _host(GELU("tanh")(x))
    assert 0 < np.abs(a - b).max() < 1e-2
    with pytest.raises(ValueError, match="approximate"):
        GELU("fast")


def test_relu_gradcheck(any_backend, float64):
    g = np.random.default_rng(3)
    x = g.standard_normal((3, 4))
    x = np.where(np.abs(x) < 0.05, 0.5, x)  # keep the kink out of the finite differences
    check_module(ReLU(), backend.asarray(x))
    np.testing.assert_array_equal(_host(ReLU()(backend.asarray(x))), np.maximum(x, 0))


# -- Dropout -----------------------------------------------------------------------
class _FixedMaskDropout(Module):
    """Rewinds the dropout stream before every forward, so each forward of a gradient
    check draws the same mask: the numerical derivative is then well defined."""

    def __init__(self, p):
        self.drop = Dropout(p, rng=backend.RNG(7))

    def forward(self, x):
        self.drop.rng.counter = 0
        return self.drop(x)

    def backward(self, dy):
        return self.drop.backward(dy)


def test_dropout_train_backward_uses_forward_mask(any_backend, float64):
    wrapped = _FixedMaskDropout(0.5)
    x = _randn(4, 6) + 3.0  # nowhere zero, so y / x recovers the mask
    check_module(wrapped, x, eval_mode=False)  # training mode, one fixed mask
    drop = Dropout(0.5, rng=backend.RNG(3))
    y = _host(drop(x))
    mask = y / _host(x)
    assert set(np.round(np.unique(mask), 12)) <= {0.0, 2.0}
    assert 0 < (mask == 0).sum() < mask.size
    dy = np.random.default_rng(1).standard_normal((4, 6))
    dx = _host(drop.backward(backend.asarray(dy)))
    np.testing.assert_allclose(dx, dy * mask, rtol=1e-12)
    # a second forward draws a new mask, and backward follows it
    y2 = _host(drop(x))
    assert not np.array_equal(y, y2)
    np.testing.assert_allclose(_host(drop.backward(backend.asarray(dy))), dy * y2 / _host(x), rtol=1e-12)


def test_dropout_eval_and_p0_are_identity(any_backend, float64):
    x = _randn(3, 5)
    d = Dropout(0.7)
    d.eval()
    assert not d.active
    np.testing.assert_array_equal(_host(d(x)), _host(x))
    dy = _randn(3, 5, seed=1)
    np.testing.assert_array_equal(_host(d.backward(dy)), _host(dy))
    d0 = Dropout(0.0)
    assert d0.training and not d0.active
    np.testing.assert_array_equal(_host(d0(x)), _host(x))
    np.testing.assert_array_equal(_host(d0.backward(dy)), _host(dy))
    d.train()
    assert d.active and not np.array_equal(_host(d(x)), _host(x))


def test_dropout_keep_rate_and_scaling(any_backend):
    d = Dropout(0.25, rng=backend.RNG(0))
    y = _host(d(backend.asarray(np.ones((200, 200), dtype=np.float32))))
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y[kept], 1.0 / 0.75, rtol=1e-6)


@pytest.mark.parametrize("p", [-0.1, 1.0])
def test_dropout_rejects_bad_p(p):
    with pytest.raises(ValueError, match="p must be in"):
        Dropout(p)


# -- FeedForward -------------------------------------------------------------------
@pytest.mark.parametrize("activation", ["gelu", "gelu_tanh", "relu"])
def test_feedforward_gradcheck(any_backend, float64, activation):
    ff = FeedForward(opts(4, d_ff=6, activation=activation), rng=backend.RNG(2))
    _randomize(ff, scale=0.3)
    names = [n for n, _ in ff.named_parameters()]
    assert names == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
    check_module(ff, _randn(2, 3, 4))


def test_feedforward_without_bias(any_backend, float64):
    ff = FeedForward(opts(3, d_ff=5, bias=False))
    assert [n for n, _ in ff.named_parameters()] == ["fc1.weight", "fc2.weight"]
    check_module(ff, _randn(2, 2, 3))


def test_feedforward_dropout_in_train_only(any_backend, float64):
    ff = FeedForward(opts(4, d_ff=8, ff_dropout=0.5))
    x = _randn(2, 3, 4)
    ff.eval()
    a, b = _host(ff(x)), _host(ff(x))
    np.testing.assert_array_equal(a, b)
    ff.train()
    assert not np.allclose(_host(ff(x)), a)
