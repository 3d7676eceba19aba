r"""Fast LSTM layer: the math of :mod:`minitransformer.nn.lstm`, with the work that does not
depend on the previous step taken out of the loop over time.

What differs from the reference (the results agree to rounding; ``tests/fast``):

* **The input projection of every step at once.** :math:`x_t W_x + b` does not depend on
  the state, so it is one (B T, D) x (D, 4H) product before the loop instead of T small
  ones; the loop keeps only :math:`h_{t-1} W_h`, the part that must wait for the step before.
* **The backward's products over all steps at once.** The loop over time computes each
  step's :math:`\partial L/\partial a_t` into one (B, T, 4H) array; afterwards
  :math:`dx = dA\,W_x^\top`, :math:`dW_x = X^\top dA`, :math:`dW_h = H_{\mathrm{prev}}^\top dA`
  and :math:`db = \sum dA` are four products over the (B T) rows, instead of 4 T small ones
  and T additions.
* **No per-step allocations.** The gates, the previous states and :math:`\tanh c_t` are
  written into (B, T, .) arrays made once, in place of a list of per-step caches and the
  concatenation of the gates at every step.
"""
from __future__ import annotations

from typing import NamedTuple

from minitransformer.backend import xp


class FastLSTMCache(NamedTuple):
    """What :func:`lstm_backward` needs, every step's in one array."""

    x: object  # (B, T, D) the inputs: dW_x = X^T dA
    h_prev: object  # (B, T, H) the hidden state before each step: dW_h = H_prev^T dA
    c_prev: object  # (B, T, H) the cell state before each step: the forget gate's gradient
    gates: object  # (B, T, 4H) i, f, g, o after their nonlinearities
    tanh_c: object  # (B, T, H) tanh of each step's new (unmasked) cell state
    m: object  # (B, T, 1) 1.0 at real steps, 0.0 at padding
    Wx: object  # (D, 4H)
    Wh: object  # (H, 4H)


def _sigmoid(a, out):
    """out = 1 / (1 + exp(-a)) = (1 + tanh(a / 2)) / 2, in place into ``out`` (no overflow)."""
    xp.multiply(a, 0.5, out=out)
    xp.tanh(out, out=out)
    out += 1.0
    out *= 0.5


def lstm_forward(x, h0, c0, Wx, Wh, b, mask=None):
    """As :func:`minitransformer.nn.lstm.lstm_forward`."""
    B, T, D = x.shape
    H = h0.shape[1]
    ax = (x.reshape(B * T, D) @ Wx).reshape(B, T, 4 * H)  # (B, T, 4H) every step's input part at once
    ax += b
    m = (xp.ones((B, T, 1), dtype=x.dtype) if mask is None
         else mask.astype(x.dtype).reshape(B, T, 1))  # (B, T, 1)
    gates = xp.empty((B, T, 4 * H), dtype=x.dtype)  # (B, T, 4H)
    h_prev = xp.empty((B, T, H), dtype=x.dtype)  # (B, T, H)
    c_prev = xp.empty((B, T, H), dtype=x.dtype)  # (B, T, H)
    tanh_c = xp.empty((B, T, H), dtype=x.dtype)  # (B, T, H)
    y = xp.empty((B, T, H), dtype=x.dtype)  # (B, T, H)
    h, c = h0, c0
    for t in range(T):
        h_prev[:, t], c_prev[:, t] = h, c
        a = ax[:, t] + h @ Wh  # (B, 4H)
        g = gates[:, t]  # (B, 4H), a view: written in place
        _sigmoid(a[:, :2 * H], g[:, :2 * H])  # i, f
        xp.tanh(a[:, 2 * H:3 * H], out=g[:, 2 * H:3 * H])  # g
        _sigmoid(a[:, 3 * H:], g[:, 3 * H:])  # o
        c_new = g[:, H:2 * H] * c + g[:, :H] * g[:, 2 * H:3 * H]  # (B, H) f c + i g
        th = xp.tanh(c_new, out=tanh_c[:, t])  # (B, H)
        mt = m[:, t]  # (B, 1)
        h = mt * (g[:, 3 * H:] * th) + (1.0 - mt) * h  # (B, H) a padded row keeps its state
        c = mt * c_new + (1.0 - mt) * c  # (B, H)
        xp.multiply(h, mt, out=y[:, t])  # 0 at padding
    return (y, h, c), FastLSTMCache(x, h_prev, c_prev, gates, tanh_c, m, Wx, Wh)


def lstm_backward(douts, cache: FastLSTMCache):
    """As :func:`minitransformer.nn.lstm.lstm_backward`."""
    dy, dh, dc = douts
    x, h_prev, c_prev, gates, tanh_c, m, Wx, Wh = cache
    B, T, H = h_prev.shape
    dh = xp.zeros((B, H), dtype=dy.dtype) if dh is None else dh  # (B, H) flowing back in time
    dc = xp.zeros((B, H), dtype=dy.dtype) if dc is None else dc  # (B, H)
    dA = xp.empty((B, T, 4 * H), dtype=dy.dtype)  # (B, T, 4H) every step's d a
    WhT = Wh.T  # (4H, H)
    for t in reversed(range(T)):
        mt = m[:, t]  # (B, 1)
        dh_out = dh + dy[:, t] * mt  # (B, H)
        g, th = gates[:, t], tanh_c[:, t]
        i, f, gg, o = g[:, :H], g[:, H:2 * H], g[:, 2 * H:3 * H], g[:, 3 * H:]  # (B, H) each
        dh_new = mt * dh_out  # (B, H)
        dc_new = mt * dc + dh_new * o * (1.0 - th * th)  # (B, H)
        da = dA[:, t]  # (B, 4H), a view
        xp.multiply(dc_new * gg, i * (1.0 - i), out=da[:, :H])
        xp.multiply(dc_new * c_prev[:, t], f * (1.0 - f), out=da[:, H:2 * H])
        xp.multiply(dc_new * i, 1.0 - gg * gg, out=da[:, 2 * H:3 * H])
        xp.multiply(dh_new * th, o * (1.0 - o), out=da[:, 3 * H:])
        dh = da @ WhT + (1.0 - mt) * dh_out  # (B, H)
        dc = dc_new * f + (1.0 - mt) * dc  # (B, H)
    dA2 = dA.reshape(B * T, 4 * H)  # (B T, 4H)
    dx = (dA2 @ Wx.T).reshape(B, T, Wx.shape[0])  # (B, T, D)
    dWx = x.reshape(B * T, -1).T @ dA2  # (D, 4H)
    dWh = h_prev.reshape(B * T, H).T @ dA2  # (H, 4H)
    return dx, dh, dc, dWx, dWh, dA2.sum(axis=0)
