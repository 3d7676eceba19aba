"""ChemNet's forward pass: each piece against its definition, and the whole network against
the reference implementation's activations.

``data/chemnet_fcd_torch.npy`` holds the activations that ``fcd_torch`` 1.0.7 (the code MOSES
runs; PyTorch 2.13 on the CPU, RDKit 2026.09) computed for the molecules of
:data:`REFERENCE_SMILES`, in a separate environment outside this repository, since
neither the package nor its tests may import torch.
"""
from pathlib import Path

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.chem._rdkit import parse_valid
from minitransformer.chem.frechet.chemnet import (PAD_LEN, SYMBOLS, conv1d_same_forward, lstm_forward, one_hot, selu,
                                          symbol_ids)

REFERENCE_SMILES = ["CCO", "CC(=O)Oc1ccccc1C(=O)O", "ClC(Cl)(Cl)Br", "C[Si](C)(C)Cl", "[Na+].[Cl-]",
                    "C[C@H](N)C(=O)O", "CN1C=NC2=C1C(=O)N(C(=O)N2C)C", "[Li]CCCC", "C" * 400,
                    "CCCCCCCCCCCCCCCCCCCC(=O)OCC(COC(=O)CCCCCCCCCCCCCCCCCCC)OC(=O)CCCCCCCCCCCCCCCCCCC"]


def _ids(*symbols):
    return [SYMBOLS.index(s) for s in symbols]


def test_symbols_are_read_as_the_reference_reads_them():
    assert symbol_ids("CCl") == _ids("C", "Cl", ".")
    assert symbol_ids("[Si]Br") == _ids("[", "Si", "]", "Br", ".")
    assert symbol_ids("[Na+]") == _ids("[", "N", "X", "+", "]", ".")  # "a" alone is unknown
    assert symbol_ids("[Li]C") == _ids("[", "X", "]", "C", ".")  # "Li" is one (unknown) symbol
    assert symbol_ids("[Cl-].[Na+]") == _ids("[", "Cl", "-", "]", ".")  # read up to the first fragment's end
    assert symbol_ids("") == _ids(".")
    long = symbol_ids("C" * 400)
    assert len(long) == PAD_LEN and long[-1] == SYMBOLS.index(".") and set(long[:-1]) == {0}


def test_one_hot_rows_padding_and_scale():
    x = one_hot(["CO", "C"])
    assert x.shape == (2, PAD_LEN, 35) and x.dtype == np.float32
    assert np.array_equal(x[0, :3].argmax(axis=1), _ids("C", "O", ".")) and not x[0, 3:].any()
    assert np.allclose(x[0, :3].sum(axis=1), 1 / 35) and np.allclose(x[1, :2].sum(axis=1), 1 / 35)


@pytest.mark.parametrize("L", [350, 175, 8, 7, 1])
def test_conv1d_same_equals_its_definition(L):
    rng = np.random.default_rng(L)
    x, W = rng.normal(size=(2, L, 3)), rng.normal(size=(4, 3, 4))
    y = conv1d_same_forward(x, W, stride=2)
    L_out = -(-L // 2)
    pad = max((L_out - 1) * 2 + 4 - L, 0)
    left = pad // 2
    want = np.zeros((2, L_out, 4))
    for t in range(L_out):  # y_t = sum_k W_k x_{2t + k - left}, zero outside the sequence
        for k in range(4):
            pos = 2 * t + k - left
            if 0 <= pos < L:
                want[:, t] += x[:, pos] @ W[:, :, k].T
    assert y.shape == (2, L_out, 4)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)


def test_selu_values():
    u = np.array([-1e4, -2.0, 0.0, 1e-3, 3.0])
    lam, alpha = 1.0507009873554805, 1.6732632423543772
    np.testing.assert_allclose(selu(u), [-lam * alpha, lam * alpha * (np.exp(-2) - 1), 0.0, lam * 1e-3, lam * 3.0],
                               rtol=1e-15)


def test_lstm_equals_the_equations_step_by_step():
    rng = np.random.default_rng(0)
    B, T, D, H = 3, 5, 2, 4
    x, W_ih, W_hh, bias = (rng.normal(size=s) for s in ((B, T, D), (4 * H, D), (4 * H, H), (4 * H,)))
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    states = lstm_forward(x, W_ih, W_hh, bias)
    for b in range(B):
        h, c = np.zeros(H), np.zeros(H)
        for t in range(T):
            z = W_ih @ x[b, t] + W_hh @ h + bias
            c = sig(z[H:2 * H]) * c + sig(z[:H]) * np.tanh(z[2 * H:3 * H])
            h = sig(z[3 * H:]) * np.tanh(c)
            np.testing.assert_allclose(states[b, t], h, rtol=1e-12, atol=1e-14)


def test_chemnet_equals_the_reference_activations(chemnet):
    want = np.load(Path(__file__).parent / "data" / "chemnet_fcd_torch.npy")  # (10, 512)
    got = chemnet.activations(parse_valid(REFERENCE_SMILES)[1], batch_size=4)
    err = np.abs(got - want)
    worst = np.unravel_index(err.argmax(), err.shape)
    assert err.max() < 2e-5, (f"ChemNet activations: largest error {err.max():.2e} at molecule {worst[0]} "
                              f"({REFERENCE_SMILES[worst[0]][:30]}), unit {worst[1]}")


def test_batching_does_not_change_the_activations(chemnet):
    canon = parse_valid(REFERENCE_SMILES)[1]
    whole = chemnet.activations(canon)
    np.testing.assert_allclose(chemnet.activations(canon, batch_size=1), whole, rtol=0, atol=1e-5)
    np.testing.assert_allclose(chemnet.activations(canon[::-1])[::-1], whole, rtol=0, atol=1e-5)


def test_chemnet_runs_on_the_strict_device_stand_in(chemnet):
    from minitransformer.chem.frechet.chemnet import ChemNet, ChemNetWeights
    weights = ChemNetWeights(**{k: backend.to_numpy(v) for k, v in chemnet.w.items()})
    canon = parse_valid(REFERENCE_SMILES[:3])[1]
    backend.use("strict")
    try:
        on_device = ChemNet(weights).activations(canon)
    finally:
        backend.use("numpy")
    np.testing.assert_allclose(on_device, chemnet.activations(canon), rtol=0, atol=1e-6)
