r"""The LSTM: one cell, and the layer that unrolls it over time, with backpropagation through time.

Before attention, sequence models carried a state from token to token. The long
short-term memory cell (Hochreiter & Schmidhuber 1997, with the forget gate of
Gers et al. 2000) keeps two vectors per sequence, the hidden state :math:`h` and
the cell state :math:`c`, and updates them from the input :math:`x_t`:

.. math::

    a &= x_t W_x + h_{t-1} W_h + b \in \mathbb{R}^{4H}, \quad
    [a_i, a_f, a_g, a_o] = \text{split}(a) \\
    i &= \sigma(a_i), \quad f = \sigma(a_f), \quad g = \tanh(a_g), \quad o = \sigma(a_o) \\
    c_t &= f \odot c_{t-1} + i \odot g \\
    h_t &= o \odot \tanh(c_t)

The input gate :math:`i` lets new content :math:`g` in, the forget gate :math:`f`
keeps or clears the old cell, the output gate :math:`o` decides what the cell
shows. Because :math:`c_t` is a gated *sum*, the gradient can flow back through
many steps without vanishing as fast as in a plain recurrent network.

**Padding.** A batch holds sequences of different lengths. A padded step
(``mask`` 0) leaves both states unchanged and outputs zeros, so its gradient to
the weights is exactly zero and a sequence's final state is the state after
its last real token.

**Backpropagation through time** (:func:`lstm_backward`) runs the cell's
backward from the last step to the first, carrying :math:`\partial L/\partial h`
and :math:`\partial L/\partial c` backwards and summing the weight gradients of
every step. The gate order in :math:`W_x, W_h, b` is ``i, f, g, o``.
"""
from __future__ import annotations

import dataclasses
from typing import NamedTuple

from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast import lstm as fast_lstm
from minitransformer.nn.config import ConfigBase
from minitransformer.nn.module import Module, Parameter

__all__ = ["lstm_cell_forward", "lstm_cell_backward", "lstm_forward", "lstm_backward", "LSTM",
           "RecurrentOptions"]


def _sigmoid(a):
    return 0.5 * (1.0 + xp.tanh(0.5 * a))  # = 1 / (1 + exp(-a)), without overflow


class LSTMCellCache(NamedTuple):
    """What :func:`lstm_cell_backward` needs, for one time step."""

    x: object  # (B, D) the input: dW_x = x^T da
    h: object  # (B, H) the previous hidden state: dW_h = h^T da
    c: object  # (B, H) the previous cell state: df = dc * c
    gates: object  # (B, 4H) i, f, g, o after their nonlinearities
    tanh_c: object  # (B, H) tanh of the new (unmasked) cell state
    m: object  # (B, 1) 1.0 for a real step, 0.0 for padding
    Wx: object  # (D, 4H)
    Wh: object  # (H, 4H)


def lstm_cell_forward(x, h, c, Wx, Wh, b, mask=None):
    """One LSTM step (the module docstring's equations).

    Args:
        x: (B, D) the inputs of this step.
        h, c: (B, H) the previous hidden and cell states.
        Wx: (D, 4H), Wh: (H, 4H), b: (4H,) the weights, gates in the order i, f, g, o.
        mask: (B,) 1 for a real step, 0 for padding (the states stay as they were); None: all real.

    Returns:
        ``((h_new, c_new), cache)``: the new states, (B, H) each.
    """
    H = h.shape[1]
    a = x @ Wx + h @ Wh + b  # (B, 4H) pre-activations
    gates = xp.concatenate([_sigmoid(a[:, :2 * H]), xp.tanh(a[:, 2 * H:3 * H]), _sigmoid(a[:, 3 * H:])],
                           axis=1)  # (B, 4H) i, f, g, o
    i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]  # (B, H) each
    c_new = f * c + i * g  # (B, H)
    tanh_c = xp.tanh(c_new)  # (B, H)
    h_new = o * tanh_c  # (B, H)
    m = xp.ones((x.shape[0], 1), dtype=x.dtype) if mask is None else mask.astype(x.dtype)[:, None]  # (B, 1)
    h_out = m * h_new + (1.0 - m) * h  # (B, H) a padded row keeps its state
    c_out = m * c_new + (1.0 - m) * c  # (B, H)
    return (h_out, c_out), LSTMCellCache(x, h, c, gates, tanh_c, m, Wx, Wh)


def lstm_cell_backward(dh_out, dc_out, cache: LSTMCellCache):
    r"""The gradients of one step, from :math:`\partial L/\partial h_t` and :math:`\partial L/\partial c_t`.

    Returns ``(dx (B, D), dh (B, H), dc (B, H), dWx (D, 4H), dWh (H, 4H), db (4H,))``; a padded
    row passes dh and dc straight back and gives no weight gradient.
    """
    x, h, c, gates, tanh_c, m, Wx, Wh = cache
    H = h.shape[1]
    i, f, g, o = gates[:, :H], gates[:, H:2 * H], gates[:, 2 * H:3 * H], gates[:, 3 * H:]  # (B, H) each
    dh_new = m * dh_out  # (B, H) the real rows' share
    dc_new = m * dc_out + dh_new * o * (1.0 - tanh_c * tanh_c)  # (B, H) through h = o tanh(c) too
    da = xp.concatenate([dc_new * g * i * (1.0 - i),  # (B, H) d a_i
                         dc_new * c * f * (1.0 - f),  # (B, H) d a_f
                         dc_new * i * (1.0 - g * g),  # (B, H) d a_g
                         dh_new * tanh_c * o * (1.0 - o)], axis=1)  # (B, 4H), d a_o last
    dx = da @ Wx.T  # (B, D)
    dh = da @ Wh.T + (1.0 - m) * dh_out  # (B, H) through the gates, and a padded row's carry
    dc = dc_new * f + (1.0 - m) * dc_out  # (B, H)
    return dx, dh, dc, x.T @ da, h.T @ da, da.sum(axis=0)


class LSTMCache(NamedTuple):
    """What :func:`lstm_backward` needs: every step's cell cache, in time order."""

    steps: list  # T LSTMCellCache
    mask: object  # (B, T) or None


def lstm_forward(x, h0, c0, Wx, Wh, b, mask=None):
    """The cell unrolled over ``T`` steps.

    Args:
        x: (B, T, D) the inputs.
        h0, c0: (B, H) the initial states (zeros for a fresh sequence).
        Wx, Wh, b: as :func:`lstm_cell_forward`.
        mask: (B, T) 1 for real tokens, 0 for padding; None: all real.

    Returns:
        ``((y, h_T, c_T), cache)``: y (B, T, H) the hidden state of every step (zeros at
        padding), h_T and c_T (B, H) the states after each sequence's last real step.
    """
    h, c, ys, steps = h0, c0, [], []
    for t in range(x.shape[1]):
        m = None if mask is None else mask[:, t]  # (B,)
        (h, c), cache = lstm_cell_forward(x[:, t], h, c, Wx, Wh, b, m)  # (B, H) each
        ys.append(h if m is None else h * m.astype(h.dtype)[:, None])  # (B, H), 0 at padding
        steps.append(cache)
    return (xp.stack(ys, axis=1), h, c), LSTMCache(steps, mask)  # y: (B, T, H)


def lstm_backward(douts, cache: LSTMCache):
    """Backpropagation through time. ``douts = (dy (B, T, H), dh_T (B, H), dc_T (B, H))`` (either
    state gradient may be None). Returns ``(dx (B, T, D), dh0, dc0, dWx, dWh, db)``."""
    dy, dh, dc = douts
    steps, mask = cache
    first = steps[0]
    B, H = first.h.shape
    dh = xp.zeros((B, H), dtype=dy.dtype) if dh is None else dh  # (B, H) flowing back in time
    dc = xp.zeros((B, H), dtype=dy.dtype) if dc is None else dc  # (B, H)
    dWx, dWh = xp.zeros_like(first.Wx), xp.zeros_like(first.Wh)  # (D, 4H), (H, 4H)
    db = xp.zeros(first.Wx.shape[1], dtype=first.Wx.dtype)  # (4H,)
    dxs = [None] * len(steps)
    for t in reversed(range(len(steps))):
        dy_t = dy[:, t] if mask is None else dy[:, t] * mask[:, t].astype(dy.dtype)[:, None]  # (B, H)
        dx, dh, dc, dWx_t, dWh_t, db_t = lstm_cell_backward(dh + dy_t, dc, steps[t])
        dWx += dWx_t
        dWh += dWh_t
        db += db_t
        dxs[t] = dx  # (B, D)
    return xp.stack(dxs, axis=1), dh, dc, dWx, dWh, db  # dx: (B, T, D)


@dataclasses.dataclass(kw_only=True)
class RecurrentOptions(ConfigBase):
    """The options the recurrent models share (:class:`~minitransformer.models.LSTMLM`,
    :class:`~minitransformer.models.RNNSeq2Seq`): embedding width D (``d_model``), LSTM state
    width H (``hidden``), ``n_layers`` LSTM layers (on each side of an encoder-decoder), the
    longest sequence ``max_len``, the special token ids and the seed. Checked like every
    config: each field its type, each size at least 1, each id a token of the vocabularies."""

    d_model: int = 64
    hidden: int = 256
    n_layers: int = 2
    max_len: int = 128
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    seed: int = 0

    _POSITIVE = ConfigBase._POSITIVE + ("hidden",)

    def __post_init__(self):
        self._check_types()
        self._check_token_ids()


class LSTM(Module):
    r"""One LSTM layer: weights ``Wx`` (D, 4H), ``Wh`` (H, 4H), ``b`` (4H,), gates i, f, g, o.

    Initialised uniform in :math:`\pm 1/\sqrt{H}`, with the forget gate's bias at 1, so that
    a fresh layer keeps its cell state rather than clearing it (Jozefowicz et al. 2015).
    ``forward(x (B, T, D), mask (B, T) or None, state=(h0, c0) or None) -> y (B, T, H)``;
    the states after the last real step are kept in ``final_state`` (decoding carries
    them from one call to the next, as a transformer carries its KV cache).
    """

    def __init__(self, d_in: int, hidden: int, rng: backend.RNG | None = None):
        rng = backend.as_rng(rng)
        self.d_in, self.hidden = d_in, hidden
        bound = 1.0 / hidden ** 0.5
        self.Wx = Parameter((rng.host_random((d_in, 4 * hidden)) * 2.0 - 1.0) * bound)  # (D, 4H)
        self.Wh = Parameter((rng.host_random((hidden, 4 * hidden)) * 2.0 - 1.0) * bound)  # (H, 4H)
        b = (rng.host_random((4 * hidden,)) * 2.0 - 1.0) * bound  # (4H,)
        b[hidden:2 * hidden] = 1.0  # the forget gate starts open
        self.b = Parameter(b)
        self.final_state = None  # (h_T, c_T) of the last forward: where decoding goes on from
        self.dinitial = None  # (dh0, dc0) of the last backward: into an encoder's final state

    def extra_repr(self):
        return f"{self.d_in}, {self.hidden}"

    def forward(self, x, mask=None, state=None):
        B = x.shape[0]
        h0, c0 = state if state is not None else (xp.zeros((B, self.hidden), dtype=x.dtype),) * 2  # (B, H) each
        W = (self.Wx.data, self.Wh.data, self.b.data)
        if kernels.fast:  # the fast twin (minitransformer/fast/lstm.py), proven equal in tests/fast
            (y, hT, cT), self.cache = fast_lstm.lstm_forward(x, h0, c0, *W, mask)
        else:
            (y, hT, cT), self.cache = lstm_forward(x, h0, c0, *W, mask)
        self.final_state = (hT, cT)
        return y  # (B, T, H)

    def backward(self, dy, dfinal=None):
        """dy: (B, T, H); dfinal: the gradient of ``final_state``, (dh_T, dc_T), or None (not
        used). Accumulates the weights' gradients; returns dx (B, T, D), and keeps the
        gradient of the initial state in ``dinitial`` ((dh0, dc0), for an encoder whose
        final state started this layer: a recurrent encoder-decoder)."""
        dh_T, dc_T = dfinal if dfinal is not None else (None, None)
        cache = self._require_cache()
        if isinstance(cache, fast_lstm.FastLSTMCache):  # the set that made the cache runs its backward
            dx, dh0, dc0, dWx, dWh, db = fast_lstm.lstm_backward((dy, dh_T, dc_T), cache)
        else:
            dx, dh0, dc0, dWx, dWh, db = lstm_backward((dy, dh_T, dc_T), cache)
        self.Wx.grad += dWx
        self.Wh.grad += dWh
        self.b.grad += db
        self.dinitial = (dh0, dc0)
        return dx
