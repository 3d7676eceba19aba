"""Bahdanau's and Luong's attention over encoder states: a value by hand, gradient checks in
float64 with a padded source, masked states with exactly zero weight and gradient, and a
source with no real token giving zeros, not NaN."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.gradcheck import check_kernel
from minitransformer.nn.rnn_attention import (additive_attention_backward, additive_attention_forward,
                                              multiplicative_attention_backward, multiplicative_attention_forward)

B, S, Hd, He, A = 3, 5, 4, 6, 7
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=bool)  # lengths 5, 2, none


def _arrays(seed):
    rng = np.random.default_rng(seed)
    dev = lambda *shape: backend.asarray(rng.standard_normal(shape) * 0.7)  # noqa: E731
    return dict(s=dev(B, Hd), E=dev(B, S, He), Wq=dev(Hd, A), Wk=dev(He, A), v=dev(A), W=dev(Hd, He))


def _additive(a, mask=None):
    return additive_attention_forward(a["s"], a["E"], a["Wq"], a["Wk"], a["v"], mask)


def _multiplicative(a, mask=None):
    return multiplicative_attention_forward(a["s"], a["E"], a["W"], mask)


def test_both_scores_by_hand(float64):
    a = {k: backend.to_numpy(v) for k, v in _arrays(0).items()}
    (ctx, alpha), _ = _additive(_arrays(0))
    b, j = 1, 3
    score = lambda jj: a["v"] @ np.tanh(a["s"][b] @ a["Wq"] + a["E"][b, jj] @ a["Wk"])  # noqa: E731
    want = np.exp([score(jj) for jj in range(S)])
    want /= want.sum()
    np.testing.assert_allclose(backend.to_numpy(alpha)[b], want, rtol=1e-12)
    np.testing.assert_allclose(backend.to_numpy(ctx)[b], want @ a["E"][b], rtol=1e-12)
    (ctx, alpha), _ = _multiplicative(_arrays(0))
    luong = np.exp([a["s"][b] @ a["W"] @ a["E"][b, jj] for jj in range(S)])
    np.testing.assert_allclose(backend.to_numpy(alpha)[b, j], luong[j] / luong.sum(), rtol=1e-12)


@pytest.mark.parametrize("masked", [False, True])
def test_additive_gradients(float64, masked):
    a = _arrays(1)
    mask = backend.asarray(MASK) if masked else None
    check_kernel(lambda s, E, Wq, Wk, v: additive_attention_forward(s, E, Wq, Wk, v, mask),
                 lambda d, c: additive_attention_backward(d[0], d[1], c),
                 {k: a[k] for k in ("s", "E", "Wq", "Wk", "v")})


@pytest.mark.parametrize("masked", [False, True])
def test_multiplicative_gradients(float64, masked):
    a = _arrays(2)
    mask = backend.asarray(MASK) if masked else None
    check_kernel(lambda s, E, W: multiplicative_attention_forward(s, E, W, mask),
                 lambda d, c: multiplicative_attention_backward(d[0], d[1], c),
                 {k: a[k] for k in ("s", "E", "W")})


@pytest.mark.parametrize("form", ["additive", "multiplicative"])
def test_masked_states_get_nothing_and_an_empty_source_gives_zeros(float64, form):
    a = _arrays(3)
    forward, backward = ((_additive, additive_attention_backward) if form == "additive"
                         else (_multiplicative, multiplicative_attention_backward))
    (ctx, alpha), cache = forward(a, backend.asarray(MASK))
    ctx, alpha = backend.to_numpy(ctx), backend.to_numpy(alpha)
    assert np.all(alpha[~MASK] == 0.0), "a masked state has exactly zero weight"
    np.testing.assert_allclose(alpha[:2].sum(axis=1), 1.0, rtol=1e-12)
    assert np.all(ctx[2] == 0.0) and np.all(alpha[2] == 0.0), "no real token: zero context, not NaN"
    grads = backward(backend.asarray(np.ones((B, He))), backend.asarray(np.ones((B, S))), cache)
    dE = backend.to_numpy(grads[1])
    assert np.all(np.isfinite(dE)) and np.all(dE[~MASK] == 0.0), "a masked state gets exactly zero gradient"
    assert np.all(backend.to_numpy(grads[0])[2] == 0.0), "the decoder state gets nothing from an empty source"


def test_multiplicative_with_the_identity_is_the_transformers_dot_product(float64):
    # Luong's "dot": W = I. Then the weights are those of one attention head with q = s,
    # k = v = E and scale 1 (minitransformer.nn.attention), the step the book takes next.
    from minitransformer.nn.attention import attention_forward
    a = _arrays(4)
    E = a["E"]
    s = E[:, 0] + 0.5  # (B, He): a query as wide as the states
    (ctx, alpha), _ = multiplicative_attention_forward(s, E, backend.asarray(np.eye(He)))
    out, cache = attention_forward(s[:, None, None, :], E[:, None], E[:, None], scale=1.0)
    np.testing.assert_allclose(backend.to_numpy(ctx), backend.to_numpy(out)[:, 0, 0], rtol=1e-12)
    np.testing.assert_allclose(backend.to_numpy(alpha), backend.to_numpy(cache.p)[:, 0, 0], rtol=1e-12)
