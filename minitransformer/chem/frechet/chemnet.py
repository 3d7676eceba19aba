r"""ChemNet, the network behind the Fréchet ChemNet Distance: its forward pass in NumPy.

ChemNet (Mayr et al. 2018, "Large-scale comparison of machine learning methods
for drug target prediction on ChEMBL", Chem. Sci. 9, 5441) was trained to
predict about 6,000 bioactivities of ChEMBL molecules from their SMILES.
Preuer et al. (2018, "Fréchet ChemNet Distance", J. Chem. Inf. Model. 58,
1736) read the 512 activations of its last hidden layer as a description of a
molecule, and compare two sets of molecules through them
(:mod:`minitransformer.chem.frechet.fcd`). This file is that network's forward pass,
written from its definition, as MOSES runs it (the ``fcd_torch`` package); it
is only ever evaluated, never trained, so it has no backward.

The input, one molecule
-----------------------
The SMILES is made canonical by RDKit, cut into symbols (a letter followed by
``l``, ``r`` or ``i`` is one symbol: ``Cl``, ``Br``, ``Si``; every other
character is one symbol), and each symbol becomes a one-hot row over the 35
symbols of :data:`SYMBOLS` (anything else is ``X``, "unknown"), followed by one
row for the end symbol ``.``. The rows fill a matrix of :data:`PAD_LEN` = 350
rows; the rows after the end stay zero (padding); a molecule longer than 349
symbols is cut there. The matrix is divided by 35. The end symbol is the same
``.`` that separates fragments in SMILES, so a multi-fragment molecule is read
up to its first ``.`` only, as in the reference implementation.

The network, for one molecule :math:`X \in \mathbb{R}^{350 \times 35}`
-----------------------------------------------------------------------
1. **Two strided convolutions.** Each is a 1-D convolution over positions with
   kernel width :math:`K = 4`, stride 2 and "same" zero padding (the input is
   padded so that the output has :math:`\lceil L/2 \rceil` positions; an odd
   amount of padding puts the extra zero at the end), no bias, then SELU:

   .. math:: y_{t} = \mathrm{SELU}\Big(\sum_{k=0}^{K-1} W_k\, x_{2t + k - p}\Big),
             \qquad \mathrm{SELU}(u) = \lambda \begin{cases} u & u > 0\\
             \alpha (e^{u} - 1) & u \le 0 \end{cases}

   with :math:`p` the left padding, :math:`W_k` the :math:`(C_{out}, C_{in})`
   slice of the weights at offset :math:`k`, :math:`\lambda \approx 1.0507` and
   :math:`\alpha \approx 1.6733`. 350 positions become 175 (35 -> 32 channels),
   then 88 (32 -> 32).
2. **LSTM 1** (128 units) reads the 88 positions from the last to the first and
   leaves a state at every position.
3. **LSTM 2** (512 units) reads LSTM 1's states from the first position to the
   last. Its final hidden state, :math:`h_{88} \in \mathbb{R}^{512}`, is the
   molecule's ChemNet activation.

Both LSTMs start from zero state and follow the usual equations (the gates in
the order input, forget, cell, output; :math:`\sigma` the logistic function):

.. math::
    z_t &= W_{ih} x_t + b_{ih} + W_{hh} h_{t-1} + b_{hh}
           = [z^i_t;\ z^f_t;\ z^g_t;\ z^o_t] \\
    c_t &= \sigma(z^f_t) \odot c_{t-1} + \sigma(z^i_t) \odot \tanh(z^g_t) \\
    h_t &= \sigma(z^o_t) \odot \tanh(c_t)

Because the last state is read after the padding, the padding is part of the
measurement: the same molecule padded to another length gets other
activations, which is why :data:`PAD_LEN` is fixed at the reference's 350.

Cost and batching. LSTM 2 dominates: 88 steps of a :math:`(B, 512) \times (512,
2048)` product, about 185 MFLOP a molecule. :meth:`ChemNet.activations` runs
molecules in batches (512 by default), so that each step is one large matrix
product: about 1 s per 1,000 molecules on two CPU cores.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from minitransformer import backend
from minitransformer.backend import xp

__all__ = ["SYMBOLS", "PAD_LEN", "symbol_ids", "one_hot", "conv1d_same_forward", "selu", "lstm_forward",
           "ChemNetWeights", "ChemNet"]

#: The 35 input symbols, in ChemNet's order; ``X`` stands for any other symbol, ``.`` ends the molecule.
SYMBOLS = ("C", "N", "O", "H", "F", "Cl", "P", "B", "Br", "S", "I", "Si", "#", "(", ")", "+", "-", "1", "2", "3",
           "4", "5", "6", "7", "8", "=", "[", "]", "@", "c", "n", "o", "s", "X", ".")
PAD_LEN = 350
_INDEX = {s: i for i, s in enumerate(SYMBOLS)}
_UNKNOWN, _END = _INDEX["X"], _INDEX["."]
_SELU_LAMBDA = 1.0507009873554804934193349852946
_SELU_ALPHA = 1.6732632423543772848170429916717


def symbol_ids(smiles: str, pad_len: int = PAD_LEN) -> list[int]:
    """The symbol ids of ``smiles`` followed by the end symbol: at most ``pad_len`` ids.

    A character followed by ``l``, ``r`` or ``i`` forms one two-letter symbol with
    it; reading stops at the first ``.`` (the end symbol); after ``pad_len - 1``
    symbols the end symbol is written in the last row. An empty string is the end
    symbol alone."""
    text = smiles + "."
    ids, i = [], 0
    while text[i] != "." and len(ids) < pad_len - 1:
        width = 2 if text[i + 1] in "lri" else 1
        ids.append(_INDEX.get(text[i:i + width], _UNKNOWN))
        i += width
    return ids + [_END]


def one_hot(smiles: Sequence[str], pad_len: int = PAD_LEN) -> np.ndarray:
    """ChemNet's input for a batch of (already canonical) SMILES: (B, pad_len, 35) float32,
    one row per symbol (:func:`symbol_ids`), zero rows after the end, divided by 35."""
    x = np.zeros((len(smiles), pad_len, len(SYMBOLS)), dtype=np.float32)  # (B, L, 35)
    for b, s in enumerate(smiles):
        ids = symbol_ids(s, pad_len)
        x[b, np.arange(len(ids)), ids] = 1.0 / len(SYMBOLS)
    return x


def conv1d_same_forward(x, W, stride: int):
    """A 1-D convolution over positions with "same" zero padding and no bias.

    x: (B, L, C_in); W: (C_out, C_in, K), the weights of output channel o for input
    channel c at kernel offset k. Returns (B, ceil(L / stride), C_out).

    The padding brings the length to what the strided windows need,
    ``(L_out - 1) * stride + K``; half of it goes before the first position
    (rounded down) and the rest after the last. Each window of K positions is
    laid out as one row of ``C_in * K`` numbers in the order of ``W``'s last two
    axes, so the convolution is a single matrix product (im2col).
    """
    B, L, C_in = x.shape
    C_out, _, K = W.shape
    L_out = -(-L // stride)
    pad = max((L_out - 1) * stride + K - L, 0)
    left = pad // 2
    padded = xp.zeros((B, L + pad, C_in), dtype=x.dtype)  # (B, L + pad, C_in)
    padded[:, left:left + L] = x
    starts = xp.arange(L_out) * stride  # (L_out,) first position of each window
    windows = padded[:, starts[:, None] + xp.arange(K)]  # (B, L_out, K, C_in)
    cols = windows.transpose(0, 1, 3, 2).reshape(B, L_out, C_in * K)  # (B, L_out, C_in*K)
    return cols @ W.reshape(C_out, C_in * K).T  # (B, L_out, C_out)


def selu(u):
    """SELU, element-wise: lambda * u for u > 0, lambda * alpha * (exp(u) - 1) otherwise. u: (...)."""
    return _SELU_LAMBDA * xp.where(u > 0, u, _SELU_ALPHA * xp.expm1(xp.minimum(u, 0)))  # (...)


def _sigmoid(u):
    """The logistic function as 0.5 * (1 + tanh(u / 2)): no overflow for any u. u: (...)."""
    return 0.5 + 0.5 * xp.tanh(0.5 * u)  # (...)


def lstm_forward(x, W_ih, W_hh, bias):
    """Run an LSTM from zero state over the positions of ``x``, first to last.

    x: (B, T, D); W_ih: (4H, D); W_hh: (4H, H); bias: (4H,), the sum of the input and
    recurrent biases. The 4H rows are the gates in the order input, forget, cell,
    output. Returns every hidden state, (B, T, H). Each step is two matrix
    products over the whole batch, then element-wise work on (B, 4H).
    """
    B, T, _ = x.shape
    H = W_hh.shape[1]
    W_ih_T, W_hh_T = xp.ascontiguousarray(W_ih.T), xp.ascontiguousarray(W_hh.T)  # (D, 4H), (H, 4H)
    h = xp.zeros((B, H), dtype=x.dtype)  # (B, H)
    c = xp.zeros((B, H), dtype=x.dtype)  # (B, H)
    states = xp.empty((B, T, H), dtype=x.dtype)  # (B, T, H)
    for t in range(T):
        z = x[:, t] @ W_ih_T + h @ W_hh_T + bias  # (B, 4H)
        i, f, o = _sigmoid(z[:, :H]), _sigmoid(z[:, H:2 * H]), _sigmoid(z[:, 3 * H:])  # (B, H) each
        g = xp.tanh(z[:, 2 * H:3 * H])  # (B, H)
        c = f * c + i * g  # (B, H)
        h = o * xp.tanh(c)  # (B, H)
        states[:, t] = h
    return states  # (B, T, H)


@dataclass(frozen=True)
class ChemNetWeights:
    """ChemNet's weights as arrays (float32), named after the layer they belong to.

    conv1: (32, 35, 4); conv2: (32, 32, 4) (output channel, input channel, offset);
    lstm1_W_ih: (512, 32), lstm1_W_hh: (512, 128), lstm1_bias: (512,);
    lstm2_W_ih: (2048, 128), lstm2_W_hh: (2048, 512), lstm2_bias: (2048,).
    :func:`~minitransformer.chem.frechet.chemnet_weights.load_chemnet_weights` reads them.
    """
    conv1: np.ndarray
    conv2: np.ndarray
    lstm1_W_ih: np.ndarray
    lstm1_W_hh: np.ndarray
    lstm1_bias: np.ndarray
    lstm2_W_ih: np.ndarray
    lstm2_W_hh: np.ndarray
    lstm2_bias: np.ndarray


class ChemNet:
    """ChemNet's forward pass (module docstring), on the active backend, in float32."""

    STRIDE = 2
    BATCH = 512

    def __init__(self, weights: ChemNetWeights):
        self.w = {name: backend.asarray(np.asarray(value, dtype=np.float32))
                  for name, value in weights.__dict__.items()}

    def forward(self, x):
        """x: (B, 350, 35), the output of :func:`one_hot`. Returns the activations, (B, 512)."""
        w = self.w
        y = selu(conv1d_same_forward(x, w["conv1"], self.STRIDE))  # (B, 175, 32)
        y = selu(conv1d_same_forward(y, w["conv2"], self.STRIDE))  # (B, 88, 32)
        backward_states = lstm_forward(y[:, ::-1], w["lstm1_W_ih"], w["lstm1_W_hh"], w["lstm1_bias"])  # (B, 88, 128)
        states = backward_states[:, ::-1]  # (B, 88, 128): LSTM 1's state at each position, in position order
        return lstm_forward(states, w["lstm2_W_ih"], w["lstm2_W_hh"], w["lstm2_bias"])[:, -1]  # (B, 512)

    def activations(self, canonical_smiles: Sequence[str], batch_size: int | None = None,
                    progress=None) -> np.ndarray:
        """The activations of each molecule, (N, 512) float32 on the host, in input order.

        ``canonical_smiles`` are written as ChemNet reads them (RDKit canonical
        SMILES; :func:`~minitransformer.chem.frechet.fcd.chemnet_activations` makes them).
        ``progress(n)`` is called after each batch with the number of molecules done.
        """
        batch_size = batch_size or self.BATCH
        out = np.empty((len(canonical_smiles), 512), dtype=np.float32)  # (N, 512)
        for start in range(0, len(canonical_smiles), batch_size):
            part = canonical_smiles[start:start + batch_size]
            out[start:start + len(part)] = backend.to_numpy(self.forward(backend.asarray(one_hot(part))))
            if progress is not None:
                progress(len(part))
        return out

