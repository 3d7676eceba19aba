"""Closing ring labels marked: the same string read back, a mark that means nothing read as a marker."""
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer.chem.datasets.ring_marks import (BAD_RING_MARK, is_closing, read_ring_marks, ring_mark_tokens,
                                                      write_ring_marks)
from minitransformer.chem.datasets.tokenizer import tokenize
from minitransformer.chem.datasets.vocab import Vocab

Chem = pytest.importorskip("rdkit.Chem")
from minitransformer.chem.judge.failures import failure_kind  # noqa: E402

MOLECULES = [
    "C1CCCCC1", "c1ccc2ccccc2c1", "C1CC1C1CC1", "C12C3C4C1C5C2C3C45", "C%10CCCCCCCCCC%10",
    "C[C@]12CC[C@H]3[C@@H](CC=C4C[C@@H](O)CC[C@@]43C)[C@@H]1CC[C@@H]2O", "C/1=C/CCCCCC1", "[NH3+]C1CC[N-]C1.[Cl-]",
]


def test_the_writing_of_some_familiar_rings():
    assert write_ring_marks("C1CCCCC1") == "C1CCCCC1'"
    assert write_ring_marks("c1ccc2ccccc2c1") == "c1ccc2ccccc2'c1'"
    assert write_ring_marks("C1CC1C1CC1") == "C1CC1'C1CC1'"  # a label used again once its ring is closed
    assert write_ring_marks("C=1CCC=1") == "C=1CCC=1'"  # a bond symbol stays where it was written
    assert write_ring_marks("CC(C)CC") == "CC(C)CC"  # no ring: unchanged
    assert ring_mark_tokens(tokenize("C%12CC%12")) == ["C", "%12", "C", "C", "%12'"]
    assert is_closing("1'") and is_closing("%12'") and not is_closing("1") and not is_closing("C'")


@pytest.mark.parametrize("smiles", MOLECULES)
def test_every_writing_reads_back_to_the_same_string(smiles):
    mol = Chem.MolFromSmiles(smiles)
    kekule = Chem.Mol(mol)
    Chem.Kekulize(kekule, clearAromaticFlags=True)
    writings = [smiles] + list(Chem.MolToRandomSmilesVect(mol, 20, randomSeed=7))
    writings += list(Chem.MolToRandomSmilesVect(kekule, 10, randomSeed=8))
    for w in writings:
        tokens = ring_mark_tokens(tokenize(w))
        assert len(tokens) == len(tokenize(w))  # one token for one: lengths, atoms and their order stay
        assert read_ring_marks(tokens) == w


def test_a_label_left_open_cannot_be_written():
    with pytest.raises(ValueError, match="never closed"):
        ring_mark_tokens(tokenize("C1CC"))


@pytest.mark.parametrize("tokens", [["C", "1'"], ["C", "1", "C", "1"], ["C", "1", "C", "1'", "C", "1'"],
                                    ["C", "2", "C", "1'", "C", "2'"]])
def test_a_mark_that_means_nothing_is_read_as_the_marker(tokens):
    back = read_ring_marks(tokens)
    assert BAD_RING_MARK in back
    assert failure_kind(back) == "ring mark"


def test_a_ring_left_open_reads_back_as_an_unclosed_ring():
    back = read_ring_marks(["C", "1", "C", "C"])
    assert back == "C1CC" and failure_kind(back) == "unclosed ring"


TOKENS = ["C", "c", "N", "(", ")", "=", "1", "2", "%10", "1'", "2'", "%10'"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_a_reading_without_the_marker_pairs_labels_as_they_were_marked(tokens):
    """Whatever a model writes, the string read back is either flagged, or a SMILES whose labels open and
    close where the marks said: marking it again gives the tokens written (an open ring stays open)."""
    back = read_ring_marks(tokens)
    if BAD_RING_MARK in back:
        return
    again, open_labels = [], set()
    for tok in tokenize(back):
        if tok in open_labels:
            open_labels.remove(tok)
            tok += "'"
        elif tok.isdigit() or tok.startswith("%"):
            open_labels.add(tok)
        again.append(tok)
    assert again == tokens


def test_the_vocabulary_of_the_writing_encodes_and_decodes_smiles():
    train = ["C1CCCCC1", "C1CC1C1CC1", "c1ccc2ccccc2c1"]
    v = Vocab.build(train, rings="marked")
    assert {"1", "1'", "2", "2'"} <= set(v.tokens)
    for s in train:
        assert v.tokens_of(s) == ring_mark_tokens(tokenize(s))
        assert v.decode(v.encode(s)) == s
    assert v.encode("C1CC") == [v.bos_id, v.unk_id, v.eos_id]  # a string the writing cannot hold
    again = Vocab.from_json(v.to_json())
    assert again == v and again.rings == "marked"
    assert Vocab.build(train) != v
    closing = v.token_to_id("1'")
    assert v.decode([v.bos_id, v.token_to_id("C"), closing, v.eos_id]) == "C" + BAD_RING_MARK


@pytest.mark.parametrize("valence", [False, True])
def test_the_smiles_grammar_reads_a_closing_mark_as_its_label(valence):
    """An opening label is banned where its ring is open, a closing one where it is not; the other rules
    read a closing label as the label (not on the atom that opened it, EOS only once every ring is closed)."""
    import numpy as np
    from minitransformer.chem.grammar.smiles_grammar import SmilesGrammar
    v = Vocab.build(["C1CCCCC1", "C1CC1C1CC1", "c1ccc2ccccc2c1"], rings="marked")

    def allowed_after(prefix):
        grammar = SmilesGrammar(v, valence=valence)
        grammar.start(np.array([[v.bos_id] + [v.token_to_id(t) for t in prefix]]), 40)
        return {v.id_to_token(i) for i, banned in enumerate(grammar.banned()[0]) if not banned}

    assert {"1", "2"} <= allowed_after(["C"]) and not {"1'", "2'"} & allowed_after(["C"])
    assert not {"1", "1'"} & allowed_after(["C", "1"])  # open already; closing onto its own atom: RDKit refuses
    after = allowed_after(["C", "1", "C", "C"])
    assert "1'" in after and "1" not in after and "<eos>" not in after and "2" in after and "2'" not in after
    assert "1" in allowed_after(["C", "1", "C", "C", "1'"]) and "<eos>" in allowed_after(["C", "1", "C", "C", "1'"])


def test_sampling_a_generator_of_marked_rings_under_the_grammar_leaves_no_ring_open():
    from minitransformer.chem.grammar.smiles_grammar import SmilesGrammar
    from minitransformer.chem.judge.failures import failure_counts
    from minitransformer.generate import sample
    from minitransformer.models import DecoderLM, DecoderLMConfig
    v = Vocab.build(MOLECULES, rings="marked")
    model = DecoderLM(DecoderLMConfig(vocab_size=len(v), max_len=40, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                      seed=3))
    free = failure_counts([v.decode(r) for r in sample(model, batch_size=200, rng=1)])
    assert free["ring mark"] > 0 and free["unclosed ring"] > 0  # an untrained model writes both
    for valence in (False, True):
        ids = sample(model, batch_size=200, rng=1, constraint=SmilesGrammar(v, valence=valence))
        constrained = failure_counts([v.decode(r) for r in ids])
        for kind in ("empty", "ring mark", "unclosed ring", "parentheses", "syntax"):
            assert constrained[kind] == 0, (valence, constrained)


def test_the_fast_scan_of_many_smiles_refuses_a_vocabulary_of_marked_rings():
    from minitransformer.chem.datasets.moses_tokens import tokenize_many
    with pytest.raises(ValueError, match="Vocab.encode"):
        tokenize_many(["C1CCCCC1"], Vocab.build(["C1CCCCC1"], rings="marked"))


def test_the_attention_of_a_generator_of_marked_rings_is_drawn_on_its_molecule(tmp_path):
    """Its tokens spell the SMILES once the marks are dropped, so the atoms are shaded as for paired labels."""
    pytest.importorskip("matplotlib")
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.viz import render_attention
    v = Vocab.build(["CC1CCCCC1N", "c1ccccc1O"], rings="marked")
    model = DecoderLM(DecoderLMConfig(vocab_size=len(v), n_layers=1, d_model=8, n_heads=2, d_ff=12, max_len=16))
    paths = render_attention(model, v, "CC1CCCCC1N", tmp_path)
    assert [p.name for p in paths] == ["attention_decoder_self.png", "attention_decoder_self_molecule.png"]
