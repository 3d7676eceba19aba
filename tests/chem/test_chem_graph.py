"""The molecule's graph as relations between tokens: the token-to-atom map holds for every
random writing (each atom token is the atom RDKit numbers so), the relations of the atoms are
the molecule's whatever the writing, bonds by type, distances clipped, fragments apart, the
non-atom tokens and <cls> in their own classes, padding apart; strings it cannot read refused."""
import numpy as np
import pytest
from rdkit import Chem

from minitransformer.chem import randomize_smiles, tokenize
from minitransformer.chem.graph import (
    ATOM_TO_MARK, BOND_SINGLE, DISTANCE, FROM_CLS, MARK_TO_ATOM, MARK_TO_MARK, OTHER_FRAGMENT, PAD, SELF, TO_CLS,
    TokenGraph, is_atom_token, n_relations, relation_batch, relation_names, token_graph,
)

DOUBLE, AROMATIC = BOND_SINGLE + 1, BOND_SINGLE + 3
MOLECULES = [
    "CC(=O)Oc1ccccc1C(=O)O",  # aspirin: branches, rings, double and aromatic bonds
    "C[C@H](N)C(=O)O",  # a stereocentre in brackets
    "[Na+].[Cl-]",  # two fragments
    "[H]C([H])([H])Cl",  # explicit hydrogens are atoms of the string
    "C#CC1CC2(CC1)CCN2",  # a triple bond, a spiro centre, two ring closures
    "c1ccc2[nH]ccc2c1",  # an aromatic [nH]
    "O=C1CCCCCCCCCCCCCC1",  # a ring longer than the clipping distance
    "C%12CC%12",  # a two-digit ring closure
]


def _element(token: str) -> str:
    """The element a SMILES atom token names (brackets, isotopes, charges and hydrogens stripped)."""
    mol = Chem.MolFromSmiles(token if token != "*" else "[*]", sanitize=False)
    return mol.GetAtomWithIdx(0).GetSymbol()


@pytest.mark.parametrize("smiles", MOLECULES)
def test_every_atom_token_is_the_atom_rdkit_numbers_so_in_every_writing(smiles):
    rng = np.random.default_rng(0)
    written = [randomize_smiles(smiles, rng) for _ in range(12)]  # (RDKit writes no explicit [H])
    atom_relations = {}
    for w in [smiles] + written:
        g = token_graph(w)
        tokens = ["<cls>"] + tokenize(w)
        params = Chem.SmilesParserParams()
        params.removeHs = False
        mol = Chem.MolFromSmiles(w, params)
        assert [_element(tokens[p]) for p in g.atoms] == [a.GetSymbol() for a in mol.GetAtoms()], w
        assert all(is_atom_token(t) == (i in set(g.atoms.tolist())) for i, t in enumerate(tokens) if i), w
        atom_relations[w] = sorted(g.relations.reshape(-1).tolist())
    # the relations of the atoms do not depend on the writing: the same multiset in each
    assert all(atom_relations[w] == atom_relations[written[0]] for w in written)


def test_aspirin_relations_by_hand():
    g = token_graph("CC(=O)O")  # <cls> C C ( = O ) O <eos>: atoms at 1, 2, 5, 7
    np.testing.assert_array_equal(g.atoms, [1, 2, 5, 7])
    single, double = BOND_SINGLE, DOUBLE
    np.testing.assert_array_equal(g.relations, [
        [SELF, single, DISTANCE + 2, DISTANCE + 2],
        [single, SELF, double, single],
        [DISTANCE + 2, double, SELF, DISTANCE + 2],
        [DISTANCE + 2, single, DISTANCE + 2, SELF]])
    rel = relation_batch([g], [9], T=11)[0]  # 9 framed tokens, 2 of padding
    assert rel.dtype == np.uint8 and rel.shape == (11, 11)
    assert rel[3, 4] == MARK_TO_MARK and rel[1, 3] == ATOM_TO_MARK and rel[8, 7] == MARK_TO_ATOM  # ( =, C (, <eos> O
    assert rel[0, 5] == FROM_CLS and rel[5, 0] == TO_CLS and rel[0, 0] == SELF and rel[8, 8] == SELF
    assert (rel[9:] == PAD).all() and (rel[:, 9:] == PAD).all()
    assert rel[2, 5] == double and rel[5, 2] == double


def test_distances_are_clipped_and_fragments_kept_apart():
    g = token_graph("O=C1CCCCCCCCCCCCCC1", max_distance=3)
    assert g.relations.max() == DISTANCE + 3 and n_relations(3) == DISTANCE + 4
    opposite = g.relations[0, 9]  # the carbonyl O and the ring's far side, 9 bonds apart
    assert opposite == DISTANCE + 3
    salt = token_graph("[Na+].[Cl-]")
    assert salt.relations[0, 1] == salt.relations[1, 0] == OTHER_FRAGMENT
    aromatic = token_graph("c1ccccc1")
    assert (aromatic.relations[0, [1, 5]] == AROMATIC).all()
    assert (token_graph("C1=CC=CC=C1").relations == aromatic.relations).all()  # a Kekule writing: RDKit's bonds
    triple, dative, quadruple = token_graph("C#N"), token_graph("[NH3]->[Fe]"), token_graph("[C]$[C]")
    assert triple.relations[0, 1] == BOND_SINGLE + 2
    assert dative.relations[0, 1] == dative.relations[1, 0] == BOND_SINGLE + 4  # any other bond, both ways
    assert quadruple.relations[0, 1] == quadruple.relations[1, 0] == BOND_SINGLE + 4


def test_relations_fit_their_count_and_have_names():
    for M in (2, 8):
        names = relation_names(M)
        assert len(names) == n_relations(M) and len(set(names)) == len(names)
        rel = relation_batch([token_graph(s, M) for s in MOLECULES], [len(tokenize(s)) + 2 for s in MOLECULES],
                             T=max(len(tokenize(s)) for s in MOLECULES) + 3)
        assert rel.max() < n_relations(M)
        # seen from the key, a relation is its mirror: the directed ones swap, the others stay
        mirror = np.arange(n_relations(M))
        mirror[[ATOM_TO_MARK, MARK_TO_ATOM, FROM_CLS, TO_CLS]] = [MARK_TO_ATOM, ATOM_TO_MARK, TO_CLS, FROM_CLS]
        np.testing.assert_array_equal(rel.transpose(0, 2, 1), mirror[rel])


@pytest.mark.parametrize("bad,match", [("C1CC", "RDKit cannot parse"), ("C" * 3000, "longer than"),
                                       ("C(C)(C)(C)(C)C", "RDKit cannot parse")])
def test_strings_it_cannot_read_are_refused(bad, match):
    with pytest.raises(ValueError, match=match):
        token_graph(bad)


def test_max_distance_below_two_is_refused():
    with pytest.raises(ValueError, match="max_distance must be an integer >= 2"):
        n_relations(1)
    assert isinstance(token_graph("CCO"), TokenGraph)
