"""Rings written by size: the same molecule read back (stereo included), and no ring left open."""
import gzip
import os
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from minitransformer.chem.datasets.ring_sizes import (BAD_RING_SIZE, read_ring_sizes, ring_size_tokens,
                                                      write_ring_sizes)
from minitransformer.chem.datasets.tokenizer import tokenize
from minitransformer.chem.datasets.vocab import Vocab

Chem = pytest.importorskip("rdkit.Chem")
from minitransformer.chem._rdkit import quiet_rdkit  # noqa: E402
from minitransformer.chem.judge.failures import failure_kind  # noqa: E402

# Fused, spiro, bridged and caged rings, a ring of more than 9 path atoms, stereo centres whose ring
# labels close in another order than they open, ring double bonds with E/Z marks, charges, salts.
MOLECULES = [
    "C1CCCCC1", "c1ccc2ccccc2c1", "CC(=O)N1CCOCC1", "C1CC2(C1)CCC2", "C1C2CC3CC1CC(C2)C3",
    "C12C3C4C1C5C2C3C45", "C1CCCCCCCCCCC1", "c1ccc2c(c1)ccc1ccccc12",
    "C[C@]12CC[C@H]3[C@@H](CC=C4C[C@@H](O)CC[C@@]43C)[C@@H]1CC[C@@H]2O",
    "O[C@@H]1[C@@H](O)[C@H](O)[C@@H](CO)O[C@H]1O", "C1CCC/C=C/CCC1", "C/C=C1/CCCC1",
    "[NH3+]C1CC[N-]C1.[Cl-]", "O=C1N[C@@H](Cc2ccccc2)C(=O)N[C@H]1C", "C1=CC=C2C=CC=CC2=C1",
    "CN1C(=O)C[C@]2(C1)c1ccccc1N[C@@H]2C", "F[C@]12CC[C@@](Cl)(CC1)CC2",
]


def same_molecule(a: str, b: str) -> bool:
    with quiet_rdkit():
        ma, mb = Chem.MolFromSmiles(a), Chem.MolFromSmiles(b)
    return ma is not None and mb is not None and Chem.MolToSmiles(ma) == Chem.MolToSmiles(mb)


def test_the_writing_of_some_familiar_rings():
    assert write_ring_sizes("C1CCCCC1") == "CCCCCC6"
    assert write_ring_sizes("c1ccc2ccccc2c1") == "ccccccccc6c%10"  # a ring of 6, then 10 atoms along the path
    assert write_ring_sizes("CC(=O)N1CCOCC1") == "CC(=O)NCCOCC6"
    assert write_ring_sizes("CC(C)CC") == "CC(C)CC"  # no ring: unchanged
    assert read_ring_sizes("ccccccccc6c%10") == "c1ccc2ccccc2c1"
    assert read_ring_sizes(["C", "C", "C", "=", "3"]) == "C1CC=1"  # the ring bond's symbol at the closing atom


@pytest.mark.parametrize("smiles", MOLECULES)
def test_every_writing_reads_back_to_the_same_molecule(smiles):
    mol = Chem.MolFromSmiles(smiles)
    writings = [smiles, Chem.MolToSmiles(mol)] + list(Chem.MolToRandomSmilesVect(mol, 30, randomSeed=7))
    kekule = Chem.Mol(mol)
    Chem.Kekulize(kekule, clearAromaticFlags=True)
    writings += list(Chem.MolToRandomSmilesVect(kekule, 10, randomSeed=8))
    for w in writings:
        written = write_ring_sizes(w)
        assert same_molecule(read_ring_sizes(written), w), (w, written, read_ring_sizes(written))


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(MOLECULES), st.integers(0, 2**31 - 1))
def test_random_writings_read_back_the_same_stereoisomer(smiles, seed):
    w = Chem.MolToRandomSmilesVect(Chem.MolFromSmiles(smiles), 1, randomSeed=seed)[0]
    assert same_molecule(read_ring_sizes(write_ring_sizes(w)), w)


def test_a_chiral_atom_whose_rings_close_in_another_order_is_turned():
    # Atom 0 opens ring 1 then ring 2; ring 2 closes first, so it is read back as its first label:
    # the neighbour order changes by one swap, and @@ must become @ for the same stereoisomer.
    smiles = "[C@@]12(Cl)CCC2CCC1"
    written = write_ring_sizes(smiles)
    assert written.startswith("[C@](Cl)"), written
    back = read_ring_sizes(written)
    assert same_molecule(back, smiles)
    assert not same_molecule(back.replace("[C@]", "[C@@]", 1), smiles)  # the turn is what keeps it


def test_a_directional_ring_bond_moved_to_the_closing_atom_turns_round():
    smiles = "C/1=C/CCCCCC1"  # the '/' stands at the opening atom
    written = write_ring_sizes(smiles)
    assert written.endswith("\\8"), written  # read from the closing atom, the bond points the other way
    assert same_molecule(read_ring_sizes(written), smiles)


@pytest.mark.parametrize("smiles,why", [
    ("C1CC", "never closed"), ("C(C1)CC1", "not on one path"), ("1CC", "does not follow an atom"),
    ("C=1CCC#1", "bond = at one end and # at the other"),
    ("[C@TH1]12(F)CCC2CCC1", "chirality class"),
])
def test_what_the_writing_cannot_hold_is_a_one_line_error(smiles, why):
    with pytest.raises(ValueError, match=why):
        ring_size_tokens(tokenize(smiles))


@pytest.mark.parametrize("written", ["CC9", "C1", "C0", "(6)CC", "6CC", "CC.C3", "CCCCCC(C)6", "CCCCC(6C)C"])
def test_a_size_that_names_no_atom_of_the_path_is_read_as_the_marker(written):
    back = read_ring_sizes(written)
    assert BAD_RING_SIZE in back
    assert failure_kind(back) == "ring size"


def test_the_reader_keeps_what_it_cannot_read_and_never_raises():
    assert read_ring_sizes(["C", "C", "=", "9"]) == "CC=" + BAD_RING_SIZE  # the bond the model wrote stays
    assert read_ring_sizes("C\u00b2") == "C\u00b2"  # a digit outside ASCII is no ring size (int() would refuse it)
    assert read_ring_sizes(["C", "<unk>", "C", "C", "3"]) == "C1<unk>CC1"  # <unk> passes through, no atom


TOKENS = ["C", "c", "N", "O", "[nH]", "(", ")", "=", "#", "/", "\\", ".", "3", "4", "5", "6", "7", "%10", "<unk>"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_whatever_a_model_writes_no_ring_is_left_open(tokens):
    """The point of the writing: a sample is never an unclosed ring, whatever the tokens."""
    back = read_ring_sizes(tokens)
    assert failure_kind(back) != "unclosed ring", (tokens, back)


def test_the_vocabulary_of_the_writing_encodes_and_decodes_smiles():
    train = ["C1CCCCC1", "CC(=O)N1CCOCC1", "c1ccc2ccccc2c1"]
    v = Vocab.build(train, rings="sizes")
    assert "%10" in v and "6" in v and "1" not in v  # sizes, not labels
    for s in train:
        assert v.tokens_of(s) == tokenize(write_ring_sizes(s))
        assert v.decode(v.encode(s)) == read_ring_sizes(write_ring_sizes(s))
        assert same_molecule(v.decode(v.encode(s)), s)
    assert v.encode("C1CC") == [v.bos_id, v.unk_id, v.eos_id]  # a string the writing cannot hold
    assert "cannot be written by size" in v.unreadable_reason("C(C1)CC1", 100)
    again = Vocab.from_json(v.to_json())
    assert again == v and again.rings == "sizes"
    assert Vocab.build(train) != v  # the same tokens' ids would mean other things
    old = Vocab.build(train).to_json()  # paired labels are written as before: a run's fingerprint stays
    assert old["version"] == 2 and "rings" not in old and Vocab.from_json(old).rings == "paired"
    assert v.to_json()["version"] == 3 and v.to_json()["rings"] == "sizes"
    with pytest.raises(ValueError, match="unknown ring writing"):
        Vocab([], rings="labels")


def test_the_smiles_grammar_refuses_a_vocabulary_of_ring_sizes():
    from minitransformer.chem.grammar.smiles_grammar import SmilesGrammar
    with pytest.raises(ValueError, match="without a grammar"):
        SmilesGrammar(Vocab.build(["C1CCCCC1"], rings="sizes"))


def _tox21_smiles(n):
    root = os.environ.get("MINITRANSFORMER_DATA")
    path = Path(root or ".") / "tox21.csv.gz"
    if not root or not path.exists():
        pytest.skip("MINITRANSFORMER_DATA is not set; the Tox21 checks need the real file")
    import csv
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [r["smiles"] for r in csv.DictReader(f)]
    return [s for s in rows if "@" in s][:n] + rows[:n]


def test_tox21_molecules_and_their_random_writings_read_back_unchanged():
    """Tox21 has stereo centres in rings, directional bonds and salts: each read back is the same stereoisomer."""
    for smiles in _tox21_smiles(300):
        with quiet_rdkit():
            mol = Chem.MolFromSmiles(smiles)
        if mol is None:
            continue
        for w in [smiles] + list(Chem.MolToRandomSmilesVect(mol, 2, randomSeed=3)):
            assert same_molecule(read_ring_sizes(write_ring_sizes(w)), w), w


def test_the_attention_of_a_generator_of_ring_sizes_is_drawn_over_its_own_tokens(tmp_path):
    """Its heatmap is labelled with the tokens it reads; no molecule is drawn (they do not spell the SMILES)."""
    pytest.importorskip("matplotlib")
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.viz import render_attention
    v = Vocab.build(["CC1CCCCC1N", "c1ccccc1O"], rings="sizes")
    model = DecoderLM(DecoderLMConfig(vocab_size=len(v), n_layers=1, d_model=8, n_heads=2, d_ff=12, max_len=16))
    paths = render_attention(model, v, "CC1CCCCC1N", tmp_path)
    assert [p.name for p in paths] == ["attention_decoder_self.png"]


def test_the_fast_scan_of_many_smiles_refuses_a_vocabulary_of_ring_sizes():
    from minitransformer.chem.datasets.moses_tokens import tokenize_many
    with pytest.raises(ValueError, match="Vocab.encode"):
        tokenize_many(["C1CCCCC1"], Vocab.build(["C1CCCCC1"], rings="sizes"))
