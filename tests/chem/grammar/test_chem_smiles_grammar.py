"""SmilesGrammar: each rule on hand-written prefixes (allowed and banned), the length
budget, random walks through the grammar, and sampling from an untrained model."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minitransformer.chem import Vocab, tokenize
from minitransformer.chem.grammar.smiles_grammar import SmilesGrammar
from minitransformer.chem.grammar.smiles_row import RING0, Row
from minitransformer.generate import greedy, sample
from minitransformer.models import DecoderLM, DecoderLMConfig

VOCAB = Vocab(["C", "c", "O", "N", "Cl", "[nH]", "[C@@H]", "(", ")", "=", "#", "-", "/", "1", "2", "3",
               "4", "5", "%10", ".", "@"])
EOS = "<eos>"


def allowed_after(prefix: str, max_len: int = 60, max_open_rings: int = 4) -> set:
    """The tokens the grammar allows after ``<bos>`` + ``prefix`` (one row)."""
    grammar = SmilesGrammar(VOCAB, max_open_rings=max_open_rings)
    ids = [VOCAB.bos_id] + [VOCAB.token_to_id(t) for t in tokenize(prefix)]
    grammar.start(np.array([ids]), max_len)
    banned = grammar.banned()[0]  # (V,)
    return {VOCAB.id_to_token(i) for i in range(len(VOCAB)) if not banned[i]}


@pytest.mark.parametrize("prefix,token,ok", [
    # 1. atoms: always
    ("", "C", True), ("C(", "c", True), ("C=", "Cl", True), ("C1", "[nH]", True), ("CC.", "O", True),
    # 2. bonds: not at the start, after a bond, after a dot
    ("", "=", False), ("C=", "#", False), ("CC.", "=", False),
    ("C", "=", True), ("C(", "=", True), ("C(C)", "=", True), ("C1", "/", True),
    # 3. branch open: not at the start, after '(', after a bond, after a dot
    ("", "(", False), ("C(", "(", False), ("C=", "(", False), ("CC.", "(", False),
    ("C", "(", True), ("C(C)", "(", True), ("C1", "(", True),
    # 4. branch close: not without an open branch, right after '(' or a bond
    ("CC", ")", False), ("C(", ")", False), ("C(=", ")", False), ("C(C)", ")", False),
    ("C(C", ")", True), ("C(C(C)", ")", True), ("C(C1", ")", True),
    # 5. ring labels: after an atom, a label, or a bond that follows one of those
    ("", "1", False), ("C(", "1", False), ("C(C)", "1", False), ("C(=", "1", False), ("C(C)=", "1", False),
    ("C", "1", True), ("C1", "2", True), ("C=", "1", True), ("C1CCCC=", "1", True), ("C", "%10", True),
    # 7. closing: not onto the opening atom, its chain neighbour, or an existing partner
    ("C1", "1", False), ("C1C", "1", False), ("C12CC1", "2", False), ("C1(C", "1", False), ("C1(CC", "1", True),
    ("C1CC", "1", True), ("C12CC1C", "2", True), ("C(C1)C", "1", True),
    # 8. EOS: not empty, not with an open branch or ring, not after a bond or '('
    ("", EOS, False), ("C(C", EOS, False), ("C1CC", EOS, False), ("CC=", EOS, False), ("CC.", EOS, False),
    ("C", EOS, True), ("C(C)", EOS, True), ("C1CC1", EOS, True), ("C1CC=1", EOS, True),
    # 9. dot: only where EOS could be
    ("C1CC", ".", False), ("C(C", ".", False), ("CC.", ".", False), ("CC", ".", True),
    # 10. specials other than EOS and non-SMILES tokens: never
    ("C", "<pad>", False), ("C", "<bos>", False), ("C", "<unk>", False), ("C", "@", False),
])
def test_rule(prefix, token, ok):
    assert (token in allowed_after(prefix)) == ok


def test_rule6_max_open_rings():
    prefix = "C1CC2CC3CC4CC"  # four rings open
    assert "5" not in allowed_after(prefix, max_open_rings=4)
    assert "1" in allowed_after(prefix, max_open_rings=4)  # closing is still fine
    assert "5" in allowed_after(prefix, max_open_rings=5)
    with pytest.raises(ValueError, match="max_open_rings"):
        SmilesGrammar(VOCAB, max_open_rings=0)


def test_rule11_length_budget():
    atoms = {"C", "c", "O", "N", "Cl", "[nH]", "[C@@H]"}
    # <bos>C1CC is 5 tokens; with max_len 8, two may follow the next one
    assert allowed_after("C1CC", max_len=8) == atoms | {"1"}
    assert allowed_after("C1CC", max_len=7) == {"1"}  # then EOS, the last position
    assert allowed_after("C(C", max_len=6) == {")"}  # then EOS
    assert allowed_after("C", max_len=3) == {EOS}
    assert "(" in allowed_after("C1CC", max_len=10)  # ( C 1 ) EOS: fits in positions 5-9
    assert "(" not in allowed_after("C1CC", max_len=9)
    assert allowed_after("", max_len=3) == atoms  # an atom, then EOS


def test_prompt_that_breaks_the_grammar_is_refused():
    grammar = SmilesGrammar(VOCAB)
    bad = [[VOCAB.bos_id, VOCAB.token_to_id("C"), VOCAB.token_to_id(")")]]
    with pytest.raises(ValueError, match="breaks the SMILES grammar at position 2"):
        grammar.start(np.array(bad), 20)


def _string_is_balanced(smiles: str) -> bool:
    depth, open_rings = 0, set()
    for tok in tokenize(smiles):
        depth += (tok == "(") - (tok == ")")
        if depth < 0:
            return False
        if tok.isdigit() or tok.startswith("%"):
            open_rings ^= {tok}
    return depth == 0 and not open_rings


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1), max_len=st.integers(3, 40), max_open=st.integers(1, 4))
def test_random_walks_always_finish_balanced(seed, max_len, max_open):
    """Any choice among the allowed tokens ends with EOS within max_len, with balanced
    parentheses and every ring closed; a token never raises the budget count by more
    than MAX_RISE, and the count never exceeds what is left."""
    rng = np.random.default_rng(seed)
    B = 8
    grammar = SmilesGrammar(VOCAB, max_open_rings=max_open)
    ids = np.full((B, max_len), VOCAB.pad_id)
    ids[:, 0] = VOCAB.bos_id
    grammar.start(ids[:, :1], max_len)
    for t in range(1, max_len):
        banned = grammar.banned()  # (B, V)
        for b, row in enumerate(grammar._rows):
            if row.last == "done":
                continue
            assert row.need() <= max_len - t
            allowed = np.flatnonzero(~banned[b])
            assert allowed.size, "a row was left with nothing allowed"
            ids[b, t] = rng.choice(allowed)
            cls = int(grammar.token_classes[ids[b, t]])
            ahead = row.clone()
            ahead.advance(min(cls, RING0), cls - RING0)
            assert ahead.need() <= row.need() + 3
        grammar.advance(ids[:, t])
    for b in range(B):
        assert (ids[b] == VOCAB.eos_id).any(), "a row was cut by max_len"
        smiles = VOCAB.decode(ids[b])
        assert smiles and _string_is_balanced(smiles), smiles


def test_random_walks_parse_with_rdkit():
    """Syntax only, but all of it: RDKit parses every walk (sanitization is not asked)."""
    Chem = pytest.importorskip("rdkit.Chem")
    from rdkit import RDLogger
    RDLogger.DisableLog("rdApp.*")
    rng = np.random.default_rng(0)
    grammar = SmilesGrammar(VOCAB)
    B, max_len = 200, 30
    grammar.start(np.full((B, 1), VOCAB.bos_id), max_len)
    rows = [[] for _ in range(B)]
    for _ in range(max_len - 1):
        tok = np.array([rng.choice(np.flatnonzero(~m)) for m in grammar.banned()])  # (B,)
        grammar.advance(tok)
        for b in range(B):
            rows[b].append(tok[b])
    failed = [s for s in map(VOCAB.decode, rows) if Chem.MolFromSmiles(s, sanitize=False) is None]
    assert failed == []


# ------------------------------------------------------------------ sampling
def untrained_lm():
    cfg = DecoderLMConfig(vocab_size=len(VOCAB), max_len=40, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                          pad_id=VOCAB.pad_id, bos_id=VOCAB.bos_id, eos_id=VOCAB.eos_id, seed=3)
    return DecoderLM(cfg)


def test_sampling_under_the_grammar_has_no_syntax_failures():
    pytest.importorskip("rdkit")
    from minitransformer.chem.judge.failures import failure_counts
    model = untrained_lm()
    free = failure_counts([VOCAB.decode(r) for r in sample(model, batch_size=200, rng=1)])
    ids = sample(model, batch_size=200, rng=1, constraint=SmilesGrammar(VOCAB))
    constrained = failure_counts([VOCAB.decode(r) for r in ids])
    assert free["unclosed ring"] > 0 and free["parentheses"] > 0
    for kind in ("empty", "unclosed ring", "parentheses", "syntax"):
        assert constrained[kind] == 0, constrained
    assert (ids == VOCAB.eos_id).any(axis=1).all()  # every row ended with EOS


def test_greedy_under_the_grammar():
    ids = greedy(untrained_lm(), batch_size=3, constraint=SmilesGrammar(VOCAB))
    for row in ids:
        assert (row == VOCAB.eos_id).any() and _string_is_balanced(VOCAB.decode(row))


def test_constraint_none_is_the_unconstrained_sampler():
    model = untrained_lm()
    a = sample(model, batch_size=50, rng=7)
    b = sample(model, batch_size=50, rng=7, constraint=None)
    np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ valence (chem/grammar/smiles_valence.py)
KEKULE = Vocab(["C", "N", "O", "F", "Cl", "S", "[N+]", "[O-]", "[C@@H]", "[NH3+]", "c", "=", "#", "-", "/",
                "(", ")", "1", "2", "3", "4", "%10", "."])


def valence_allows(prefix: str, vocab=KEKULE, max_len: int = 80) -> set:
    grammar = SmilesGrammar(vocab, valence=True)
    ids = [vocab.bos_id] + [vocab.token_to_id(t) for t in tokenize(prefix)]
    grammar.start(np.array([ids]), max_len)
    banned = grammar.banned()[0]  # (V,)
    return {vocab.id_to_token(i) for i in range(len(vocab)) if not banned[i]}


def test_atom_capacities_are_rdkits():
    pytest.importorskip("rdkit")
    from minitransformer.chem.grammar.smiles_valence import atom_capacity
    want = {"C": 4, "N": 3, "O": 2, "F": 1, "Cl": 1, "S": 6, "[N+]": 4, "[O-]": 1, "[C@@H]": 3, "[NH3+]": 1}
    assert {t: atom_capacity(t) for t in want} == want
    assert atom_capacity("c") == atom_capacity("*") == np.inf  # aromatic and dummy atoms: not limited


@pytest.mark.parametrize("prefix,token,ok", [
    # V1: the new atom takes the bond, and cur has room for it
    ("C=", "F", False), ("C=", "O", True), ("C#", "O", False), ("C#", "N", True), ("C[O-]", "C", False),
    ("CC(F)(F)(F)", "F", False), ("CC(F)(F)", "F", True), ("C=", "[NH3+]", False), ("C", "[NH3+]", True),
    # V2, V3: a bond symbol or a branch needs room on cur
    ("CC(C)(C)", "=", False), ("CC(C)", "=", True), ("CO", "=", False), ("C=O", "(", False), ("CO", "(", True),
    # V4: ring bonds count on both ends; two different symbols on one ring bond are banned
    ("C1CC(F", "1", False), ("C1CC(C", "1", True), ("C=1CC#", "1", False), ("C=1CC=", "1", True),
    ("C1CC=", "1", True), ("C1(C)(C)CC=", "1", False),
    ("C1CCO", "=", False), ("C1CC(C)(C)C", "=", True),
    # V5: no dead end with a ring open (O would leave nothing to close ring 1 or go on from)
    ("C1CC(=", "O", True), ("C1CC(", "F", True), ("C1C=", "O", False), ("CC=", "O", True),
    ("C1CC(C)(C)(C", ")", False), ("C1CC(C)(C", ")", True),
])
def test_valence_rule(prefix, token, ok):
    pytest.importorskip("rdkit")
    assert (token in valence_allows(prefix)) == ok


def test_valence_never_bans_a_real_molecule():
    """The 1,500 first drug-like molecules, aromatic and Kekule: no token of theirs is banned."""
    Chem = pytest.importorskip("rdkit.Chem")
    from minitransformer.chem.datasets.data import load_source
    smiles = load_source("druglike").smiles[:1500]
    kekule = []
    for s in smiles:
        mol = Chem.MolFromSmiles(s)
        Chem.Kekulize(mol, clearAromaticFlags=True)
        kekule.append(Chem.MolToSmiles(mol, kekuleSmiles=True))
    for molecules in (smiles, kekule):
        tokens = [tokenize(s) for s in molecules]
        vocab = Vocab(sorted({t for ts in tokens for t in ts}))
        grammar = SmilesGrammar(vocab, valence=True)
        for s, ts in zip(molecules, tokens):
            ids = [vocab.token_to_id(t) for t in ts] + [vocab.eos_id]
            grammar.start(np.array([[vocab.bos_id]]), 200)
            for j, i in enumerate(ids):
                assert not grammar.banned()[0, i], f"{s}: token {j} ({vocab.id_to_token(i)!r}) banned"
                grammar.advance(np.array([i]))


@pytest.mark.parametrize("max_len", [8, 20, 60])
def test_valence_walks_in_kekule_form_all_finish_and_sanitize(max_len):
    """Uniform random walks over Kekule tokens under syntax + valence: every row ends with
    an EOS the rules allowed (the length budget counts what valence needs), and RDKit
    parses and sanitizes every string (the two rule sets cover all its checks)."""
    Chem = pytest.importorskip("rdkit.Chem")
    from rdkit import RDLogger
    RDLogger.DisableLog("rdApp.*")
    vocab = Vocab([t for t in KEKULE.tokens[KEKULE.n_specials:] if t != "c"])
    rng = np.random.default_rng(max_len)
    B = 200
    grammar = SmilesGrammar(vocab, valence=True)
    grammar.start(np.full((B, 1), vocab.bos_id), max_len)
    rows = [[] for _ in range(B)]
    for _ in range(max_len - 1):
        tok = []
        for b, mask in enumerate(grammar.banned()):
            if grammar._rows[b].last == "done":
                tok.append(vocab.pad_id)
                continue
            allowed = np.flatnonzero(~mask)
            assert allowed.size, f"row {b} has nothing allowed after {vocab.decode(rows[b])!r}"
            tok.append(rng.choice(allowed))
        grammar.advance(np.array(tok))
        for b in range(B):
            rows[b].append(tok[b])
    smiles = [vocab.decode(r) for r in rows]
    assert all(vocab.eos_id in r for r in rows), "a row was cut by max_len"
    assert [s for s in smiles if Chem.MolFromSmiles(s) is None] == []


def test_valence_budget_counts_the_atoms_valence_needs():
    """C=1CC + O: the ring needs a double bond, O has room for one single bond, so a
    closing atom must come first: 3 more tokens (C, 1, EOS) where the budget leaves 2."""
    pytest.importorskip("rdkit")
    assert "O" not in valence_allows("C=1CC", max_len=9) and "1" in valence_allows("C=1CC", max_len=9)
    assert "O" in valence_allows("C=1CC", max_len=10)
