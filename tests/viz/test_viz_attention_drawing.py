"""Attention on the molecule: tokens map to the right atoms, weights land on them, a PNG comes out."""
import numpy as np
import pytest

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")

from minitransformer.chem import tokenize  # noqa: E402
from minitransformer.viz.attention_drawing import (atom_weights, attention_received,  # noqa: E402
                                                    draw_attention_on_molecule, molecule_of,
                                                    token_atom_indices)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TRICKY = [
    "Cc1c[nH]c2ccc(Cl)cc12",         # aromatic, [nH], two-letter element, fused rings
    "C[N+](C)(C)CC(=O)[O-]",         # charges in brackets
    "Br/C=C/[C@@H](F)[Si](C)(C)C",   # stereo bonds, chirality, a bracket element outside the subset
    "[H]C([H])([H])O",               # explicit hydrogens: RDKit drops them unless told not to
    "[2H]c1ccc2c(c1)C%10CCC2.Cl%10",  # isotope, two-digit ring closure, a dot
    "O=S(=O)(N)c1ccccc1*",           # a wildcard atom
]


def _expected_symbol(token: str) -> tuple[str, bool]:
    """(element symbol, aromatic) a token writes, read from the token itself."""
    inner = token.strip("[]").lstrip("0123456789")
    name = inner[:2] if inner[:2] in ("Cl", "Br", "Si") else inner[:1]
    return name.capitalize(), name.islower()


@pytest.mark.parametrize("smiles", TRICKY)
def test_atom_tokens_follow_rdkit_atom_order(smiles):
    tokens = tokenize(smiles)
    mol = molecule_of(smiles)
    index = token_atom_indices(tokens)
    atoms = [(t, i) for t, i in zip(tokens, index) if i is not None]
    assert [i for _, i in atoms] == list(range(mol.GetNumAtoms()))
    for token, i in atoms:
        atom = mol.GetAtomWithIdx(i)
        symbol, aromatic = _expected_symbol(token)
        assert (atom.GetSymbol(), atom.GetIsAromatic()) == (symbol, aromatic), (token, i)
        if token.startswith("[") and ("+" in token or "-" in token):
            assert atom.GetFormalCharge() == (1 if "+" in token else -1)


def test_non_atom_tokens_map_to_none():
    tokens = ["<bos>", "C", "(", "=", "O", ")", "c", "1", "%12", "[O-]", ".", "<eos>", "<cls>"]
    assert token_atom_indices(tokens) == [None, 0, None, None, 1, None, 2, None, None, 3, None, None, None]


def test_weights_land_on_the_atoms_of_their_tokens():
    smiles = "CC(=O)Cl"
    tokens = ["<cls>"] + tokenize(smiles) + ["<eos>"]  # <cls> C C ( = O ) Cl <eos>
    w = np.arange(len(tokens), dtype=float)  # (9,)
    mol, atoms, left_out = atom_weights(smiles, tokens, w)
    np.testing.assert_array_equal(atoms, [1, 2, 5, 7])
    assert left_out == 0 + 3 + 4 + 6 + 8
    with pytest.raises(ValueError, match="spell"):
        atom_weights("CCO", tokens, w)
    with pytest.raises(ValueError, match="one weight per token"):
        atom_weights(smiles, tokens, w[:-1])
    with pytest.raises(ValueError, match="cannot parse"):
        molecule_of("C1CC")


def test_attention_received_averages_layers_heads_and_queries():
    rng = np.random.default_rng(0)
    maps = [rng.dirichlet(np.ones(4), size=(2, 3, 5)) for _ in range(2)]  # 2 x (B=2, H=3, Tq=5, Tk=4)
    w = attention_received(maps, sample=1)  # (4,)
    np.testing.assert_allclose(w, np.mean([m[1] for m in maps], axis=(0, 1, 2)))
    assert w.sum() == pytest.approx(1.0)
    w = attention_received(maps, layers=1, heads=[0, 2], query_rows=[4])
    np.testing.assert_allclose(w, maps[1][0, [0, 2], 4].mean(axis=0))


def test_drawing_returns_png_bytes_and_writes_atomically(tmp_path):
    smiles = "Cc1c[nH]c2ccc(Cl)cc12"
    tokens = ["<bos>"] + tokenize(smiles)
    w = np.linspace(0.0, 1.0, len(tokens))  # (T,)
    png = draw_attention_on_molecule(smiles, w, tokens, None, size=(300, 240), title="test")
    assert png[:8] == PNG_MAGIC
    path = tmp_path / "sub" / "mol.png"
    assert draw_attention_on_molecule(smiles, w, tokens, path, size=(300, 240)) == path.read_bytes()
    with pytest.raises(ValueError, match="cannot parse"):
        draw_attention_on_molecule("C1CC", [0.25] * 4, ["C", "1", "C", "C"], tmp_path / "bad.png")
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["mol.png", "sub"]
