"""The fast LSTM layer (minitransformer/fast/lstm.py: the input projection of all steps at once,
the backward's products over all steps at once) equals the reference, padding included."""
from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from fast_helpers import assert_close, assert_unchanged, covers, dev, FAST, REFERENCE, run_forward, SETTINGS


@covers("lstm_forward", "lstm_backward")
@SETTINGS
@given(B=st.integers(1, 4), T=st.integers(1, 6), D=st.integers(1, 5), H=st.integers(1, 5),
       masked=st.booleans(), state_grads=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_lstm(any_backend, B, T, D, H, masked, state_grads, seed):
    g = np.random.default_rng(seed)
    x, h0, c0 = g.standard_normal((B, T, D)), g.standard_normal((B, H)), g.standard_normal((B, H))
    Wx, Wh, b = g.standard_normal((D, 4 * H)) * 0.5, g.standard_normal((H, 4 * H)) * 0.5, g.standard_normal(4 * H)
    lengths = g.integers(0, T + 1, size=B)  # 0: a row of padding only
    mask = dev(np.arange(T)[None, :] < lengths[:, None]) if masked else None
    args = [dev(a) for a in (x, h0, c0, Wx, Wh, b)]
    (out_f, cache_f), (out_r, cache_r) = run_forward("lstm_forward", *args, mask)
    assert_unchanged(["x", "h0", "c0", "Wx", "Wh", "b"], args, [x, h0, c0, Wx, Wh, b])
    for name, f, r in zip(["y", "h_T", "c_T"], out_f, out_r):
        assert_close(name, f, r, scale=1.0)
    dy = dev(g.standard_normal((B, T, H)))
    dh, dc = (dev(g.standard_normal((B, H))), dev(g.standard_normal((B, H)))) if state_grads else (None, None)
    scale = float(T * max(D, H, 1))  # gradients are sums over the steps of products of unit-sized terms
    for name, f, r in zip(["dx", "dh0", "dc0", "dWx", "dWh", "db"], FAST["lstm_backward"]((dy, dh, dc), cache_f),
                          REFERENCE["lstm_backward"]((dy, dh, dc), cache_r)):
        assert_close(name, f, r, scale=scale)
