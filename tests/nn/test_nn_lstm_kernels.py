"""The LSTM cell and its unrolled layer: gradient-checked in float64 (padding included), and a padded
step that leaves the state as it was and gets exactly zero gradient."""
import numpy as np

from minitransformer import backend
from minitransformer.gradcheck import check_kernel
from minitransformer.nn.lstm import lstm_backward, lstm_cell_backward, lstm_cell_forward, lstm_forward

B, T, D, H = 3, 5, 4, 6
MASK = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]])  # (B, T): lengths 5, 3, 1


def _arrays(seed):
    rng = np.random.default_rng(seed)
    dev = lambda *shape, s=0.5: backend.asarray(rng.standard_normal(shape) * s)  # noqa: E731
    return dict(x=dev(B, T, D), h0=dev(B, H), c0=dev(B, H), Wx=dev(D, 4 * H), Wh=dev(H, 4 * H), b=dev(4 * H))


def test_the_cell_by_hand(float64):
    a = _arrays(0)
    x, h, c = a["x"][:, 0], a["h0"], a["c0"]
    (h1, c1), _ = lstm_cell_forward(x, h, c, a["Wx"], a["Wh"], a["b"])
    z = backend.to_numpy(x @ a["Wx"] + h @ a["Wh"] + a["b"])
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    i, f, g, o = sig(z[:, :H]), sig(z[:, H:2 * H]), np.tanh(z[:, 2 * H:3 * H]), sig(z[:, 3 * H:])
    c_want = f * backend.to_numpy(c) + i * g
    np.testing.assert_allclose(backend.to_numpy(c1), c_want, rtol=1e-12)
    np.testing.assert_allclose(backend.to_numpy(h1), o * np.tanh(c_want), rtol=1e-12)


def test_the_cell_gradients_with_a_padded_row(float64):
    a = _arrays(1)
    mask = backend.asarray(np.array([1, 0, 1]))

    def forward(x, h, c, Wx, Wh, b):
        return lstm_cell_forward(x, h, c, Wx, Wh, b, mask)

    check_kernel(forward, lambda d, cache: lstm_cell_backward(d[0], d[1], cache),
                 {"x": a["x"][:, 0], "h": a["h0"], "c": a["c0"], "Wx": a["Wx"], "Wh": a["Wh"], "b": a["b"]})


def test_backpropagation_through_time(float64):
    a = _arrays(2)
    mask = backend.asarray(MASK)
    check_kernel(lambda x, h0, c0, Wx, Wh, b: lstm_forward(x, h0, c0, Wx, Wh, b, mask), lstm_backward, a)
    check_kernel(lambda x, h0, c0, Wx, Wh, b: lstm_forward(x, h0, c0, Wx, Wh, b), lstm_backward, a)


def test_padding_keeps_the_state_and_gets_zero_gradient(float64):
    a = _arrays(3)
    mask = backend.asarray(MASK)
    (y, hT, cT), cache = lstm_forward(**a, mask=mask)
    y, hT = backend.to_numpy(y), backend.to_numpy(hT)
    assert np.all(y[MASK == 0] == 0.0), "padded steps output zeros"
    np.testing.assert_array_equal(hT[1], y[1, 2]), "sequence 1 ends at its 3rd token"
    short = {k: (v[1:2, :3] if k == "x" else v[1:2] if k in ("h0", "c0") else v) for k, v in a.items()}
    (y_short, h_short, _), _ = lstm_forward(**short)
    np.testing.assert_allclose(backend.to_numpy(h_short)[0], hT[1], rtol=1e-12)
    dy = np.zeros((B, T, H))
    dy[MASK == 0] = 1.0  # gradient only on padded outputs
    dx, dh0, dc0, dWx, dWh, db = lstm_backward((backend.asarray(dy), None, None), cache)
    assert all(np.all(backend.to_numpy(g) == 0.0) for g in (dx, dh0, dc0, dWx, dWh, db)), \
        "an output at a padded step is a constant zero: nothing flows from it"
