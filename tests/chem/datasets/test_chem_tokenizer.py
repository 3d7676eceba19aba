"""SMILES tokenizer: exact tokenizations, losslessness, and what falls outside the regex."""
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer.chem.datasets.tokenizer import is_ring_label, tokenize, uncovered_characters


@pytest.mark.parametrize("smiles, expected", [
    ("c1cc[nH]c1", ["c", "1", "c", "c", "[nH]", "c", "1"]),
    ("BrCCCl", ["Br", "C", "C", "Cl"]),
    ("C%12CCCC%12", ["C", "%12", "C", "C", "C", "C", "%12"]),
    ("N[C@@H](C)C(=O)O", ["N", "[C@@H]", "(", "C", ")", "C", "(", "=", "O", ")", "O"]),
    ("C[C@@](F)(Cl)Br", ["C", "[C@@]", "(", "F", ")", "(", "Cl", ")", "Br"]),
    ("F/C=C\\F", ["F", "/", "C", "=", "C", "\\", "F"]),
    ("[Na+].[Cl-]", ["[Na+]", ".", "[Cl-]"]),
    ("[13CH3]C#N", ["[13CH3]", "C", "#", "N"]),
    ("CC>>CC", ["C", "C", ">", ">", "C", "C"]),
    ("*C$C~C:C?", ["*", "C", "$", "C", "~", "C", ":", "C", "?"]),
    ("B(O)O", ["B", "(", "O", ")", "O"]),
    ("C@@C", ["C", "@", "@", "C"]),  # outside brackets '@' is a token of its own
    ("o1cccc1", ["o", "1", "c", "c", "c", "c", "1"]),
    ("", []),
])
def test_specific_tokenizations(smiles, expected):
    got = tokenize(smiles)
    assert got == expected, f"tokenize({smiles!r}) = {got}, expected {expected}"


@pytest.mark.parametrize("text, uncovered", [
    ("CCO", []),
    ("CA", [(1, "A")]),            # 'A' is no organic-subset atom
    ("CH4", [(1, "H")]),           # hydrogen is written only inside brackets
    ("C l", [(1, " "), (2, "l")]), # white space; a lone 'l' (no 'Cl' across the gap)
    ("[nH", [(0, "["), (2, "H")]), # '[' without ']' is no bracket atom; 'n' alone is covered
    ("C]", [(1, "]")]),
    ("C%1", [(1, "%")]),           # '%' needs two digits
    ("C!\n", [(1, "!"), (2, "\n")]),
    ("Sn", []),                    # 'S' then aromatic 'n': covered, though chemically odd
])
def test_uncovered_characters_become_single_tokens(text, uncovered):
    extra = uncovered_characters(text)
    assert extra == uncovered, f"uncovered_characters({text!r}) = {extra}, expected {uncovered}"
    tokens = tokenize(text)
    assert "".join(tokens) == text
    for _, char in extra:
        assert char in tokens, f"{char!r} should be a token of its own in {tokens}"


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_round_trip_arbitrary_text(text):
    tokens = tokenize(text)
    assert "".join(tokens) == text, f"lost characters: {text!r} -> {tokens}"
    assert all(tokens), "no empty tokens"


SMILES_ALPHABET = "BCNOSPFIHKLAZabclnoprs[]()=#$:~./\\@+-*>?%0123456789 "


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=SMILES_ALPHABET, max_size=60))
def test_round_trip_smiles_like_text(text):
    assert "".join(tokenize(text)) == text


TOKENS = ["C", "N", "O", "S", "P", "F", "I", "B", "Br", "Cl", "c", "n", "o", "s", "p",
          "[nH]", "[C@@H]", "[NH4+]", "[O-]", "(", ")", "=", "#", "-", "+", "/", "\\", ".",
          "@", "*", "1", "2", "9", "%10", "%99"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40))
def test_concatenated_tokens_split_back(tokens):
    text = "".join(tokens)
    assert tokenize(text) == tokens, f"{text!r}: got {tokenize(text)}"
    assert uncovered_characters(text) == []


def test_rejects_non_strings():
    with pytest.raises(TypeError):
        tokenize(None)


def test_all_tox21_smiles_round_trip(tox21_smiles):
    bad = [s for s in tox21_smiles if "".join(tokenize(s)) != s]
    assert not bad, f"{len(bad)} Tox21 SMILES do not round-trip, e.g. {bad[:3]}"
    stray = {s: uncovered_characters(s) for s in tox21_smiles if uncovered_characters(s)}
    assert not stray, f"Tox21 SMILES with characters outside the regex: {list(stray.items())[:3]}"


def test_tox21_alphabet_matches_reference(tox21_smiles):
    """The 7246 length-filtered Tox21 SMILES use 110 distinct tokens (the reference alphabet)."""
    kept = [s for s in tox21_smiles if 10 <= len(s) <= 100]
    alphabet = dict.fromkeys(tok for s in kept for tok in tokenize(s))
    assert len(kept) == 7246
    assert len(alphabet) == 110, f"{len(alphabet)} distinct tokens: {list(alphabet)}"


def test_a_ring_label_is_one_ascii_digit_or_a_percent_and_two():
    assert all(is_ring_label(t) for t in ("0", "7", "%10", "%99"))
    assert not any(is_ring_label(t) for t in ("\u00b2", "%", "%1", "%1\u00b2", "1'", "C", "12", "(", ""))
    assert [t for t in tokenize("C1CC%12CC\u00b2") if is_ring_label(t)] == ["1", "%12"]
