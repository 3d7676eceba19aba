"""Bahdanau's and Luong's attention over encoder states: a value by hand, gradient checks in
float64 with a padded source, masked states with exactly zero weight and gradient, and a
source with no real token giving zeros, not NaN."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.gradcheck import check_kernel
from minitransformer.nn.rnn_attention import (EncoderAttention, additive_attention_backward,
                                              additive_attention_forward, additive_keys_backward,
                                              additive_keys_forward, multiplicative_attention_backward,
                                              multiplicative_attention_forward)

B, S, Hd, He, A = 3, 5, 4, 6, 7
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [0, 0, 0, 0, 0]], dtype=bool)  # lengths 5, 2, none


def _arrays(seed):
    rng = np.random.default_rng(seed)
    dev = lambda *shape: backend.asarray(rng.standard_normal(shape) * 0.7)  # noqa: E731
    return dict(s=dev(B, Hd), E=dev(B, S, He), Wq=dev(Hd, A), Wk=dev(He, A), v=dev(A), W=dev(Hd, He))


def _additive(a, mask=None):
    K, _ = additive_keys_forward(a["E"], a["Wk"])  # (B, S, A)
    return additive_attention_forward(a["s"], a["E"], K, a["Wq"], a["v"], mask)


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
    a["K"] = backend.asarray(np.random.default_rng(11).standard_normal((B, S, A)) * 0.7)
    mask = backend.asarray(MASK) if masked else None
    check_kernel(lambda s, E, K, Wq, v: additive_attention_forward(s, E, K, Wq, v, mask),
                 lambda d, c: additive_attention_backward(d[0], d[1], c),
                 {k: a[k] for k in ("s", "E", "K", "Wq", "v")})


def test_additive_keys_gradients(float64):
    a = _arrays(4)
    check_kernel(additive_keys_forward, additive_keys_backward, {k: a[k] for k in ("E", "Wk")})


@pytest.mark.parametrize("masked", [False, True])
def test_the_layer_over_several_steps_sums_the_keys_gradient_once(float64, masked):
    """EncoderAttention as the model drives it: keys once, three steps, the keys' gradient
    summed and handed back once; against finite differences of the whole loss."""
    rng = np.random.default_rng(5)
    layer = EncoderAttention("additive", Hd, He, d_attn=A, rng=0)
    E = backend.asarray(rng.standard_normal((B, S, He)) * 0.7)
    states = [backend.asarray(rng.standard_normal((B, Hd)) * 0.7) for _ in range(3)]
    upstream = [backend.asarray(rng.standard_normal((B, He))) for _ in range(3)]
    mask = backend.asarray(MASK) if masked else None

    def loss(E):
        K, _ = layer.keys(E)
        return sum(float((layer.step_forward(s, E, mask, keys=K)[0][0] * g).sum()) for s, g in zip(states, upstream))

    K, keys_cache = layer.keys(E)  # (B, S, A)
    caches = [layer.step_forward(s, E, mask, keys=K)[1] for s in states]
    layer.zero_grad()
    dE, dK = 0.0, 0.0
    for cache, g in zip(caches, upstream):
        _, dE_t, dK_t = layer.step_backward(g, cache)
        dE, dK = dE + dE_t, dK + dK_t
    dE = dE + layer.keys_backward(dK, keys_cache)
    eps = 1e-6
    E_host = backend.to_numpy(E)
    for idx in [(0, 0, 0), (1, 1, 2), (2, 4, 5), (1, 3, 1)]:
        plus, minus = E_host.copy(), E_host.copy()
        plus[idx] += eps
        minus[idx] -= eps
        numeric = (loss(backend.asarray(plus)) - loss(backend.asarray(minus))) / (2 * eps)
        assert abs(backend.to_numpy(dE)[idx] - numeric) < 1e-7 * max(1.0, abs(numeric)), f"dE{idx}"
    Wk = layer.Wk.data.copy()
    for idx in [(0, 0), (5, 6), (3, 2)]:
        base = backend.to_numpy(Wk)
        numeric = []
        for sign in (1, -1):
            changed = base.copy()
            changed[idx] += sign * eps
            layer.Wk.data = backend.asarray(changed)
            numeric.append(loss(E))
        layer.Wk.data = Wk
        numeric = (numeric[0] - numeric[1]) / (2 * eps)
        assert abs(backend.to_numpy(layer.Wk.grad)[idx] - numeric) < 1e-7 * max(1.0, abs(numeric)), f"dWk{idx}"


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
    if form == "additive":  # the keys' gradient (their share of dE comes through W_k later)
        assert np.all(backend.to_numpy(grads[2])[~MASK] == 0.0), "a masked key gets exactly zero gradient"


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
