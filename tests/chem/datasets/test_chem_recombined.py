"""Heavier molecules joined from halves of real ones at BRICS bonds."""
import gzip

import pytest

from minitransformer.chem import canonical
from minitransformer.chem.datasets import recombined
from minitransformer.chem.datasets.data import druglike_path, read_smiles
from minitransformer.chem.datasets.recombined import (RecombineSettings, compatible_labels, cut_halves, join_halves,
                                                      recombine)


@pytest.fixture(scope="module")
def druglike():
    return read_smiles(druglike_path(), header=False)[:400]


def _props(smiles):
    from rdkit import Chem
    from rdkit.Chem import QED, Crippen, Descriptors, Lipinski
    mol = Chem.MolFromSmiles(smiles)
    return dict(weight=Descriptors.MolWt(mol), logp=Crippen.MolLogP(mol), donors=Lipinski.NumHDonors(mol),
                acceptors=Lipinski.NumHAcceptors(mol), rotatable=Lipinski.NumRotatableBonds(mol), qed=QED.qed(mol))


def test_joining_two_halves_bonds_their_open_ends():
    from rdkit import Chem
    mol = join_halves("[1*]C(C)=O", "[5*]Nc1ccccc1")
    assert Chem.MolToSmiles(mol) == canonical("CC(=O)Nc1ccccc1")
    assert join_halves("[1*]C(C)=O", "CCO") is None  # one open end only
    assert join_halves("not a half", "[5*]N") is None


def test_the_two_halves_of_every_cut_join_back_into_the_molecule():
    from rdkit import Chem
    from rdkit.Chem import BRICS
    source = "CC(=O)Nc1ccc(OCC(O)CNC(C)C)cc1"
    mol = Chem.MolFromSmiles(source)
    cuts = 0
    for bond in BRICS.FindBRICSBonds(mol):
        a, b = Chem.MolToSmiles(BRICS.BreakBRICSBonds(mol, bonds=[bond])).split(".")
        assert Chem.MolToSmiles(join_halves(a, b)) == canonical(source), bond
        cuts += 1
    assert cuts >= 4
    halves, labels, weights = cut_halves([source])
    assert len(halves) == len(labels) == len(weights) and len(set(halves)) == len(halves)
    assert all(h.count("*") == 1 for h in halves) and (weights >= recombined.MIN_HALF_WEIGHT).all()


def test_bond_rules_are_brics_single_bonds_both_ways():
    rules = compatible_labels()
    assert 7 not in rules  # the double-bond rule is left out
    assert 3 in rules[1] and 5 in rules[1] and 10 in rules[1] and 16 in rules[16]
    assert all(a in rules[b] for a, partners in rules.items() for b in partners)


def test_recombined_molecules_are_new_distinct_in_the_window_and_drug_like(druglike):
    s = RecombineSettings(n=150, sources=300, min_weight=400, max_weight=550, seed=3)
    logs = []
    out = recombine(druglike, s, log=logs.append)
    assert len(out) == 150 and len(set(out)) == 150 and logs[0].startswith("recombining:")
    known = {canonical(x) for x in druglike}
    for smiles in out:
        assert canonical(smiles) == smiles and smiles not in known
        p = _props(smiles)
        assert 400 <= p["weight"] <= 550 + 1e-6, (smiles, p)
        assert p["logp"] <= s.max_logp and p["donors"] <= 5 and p["acceptors"] <= 10, (smiles, p)
        assert p["rotatable"] <= s.max_rotatable and p["qed"] >= s.min_qed, (smiles, p)
    assert recombine(druglike, s, log=logs.append) == out  # a pure function of its settings
    assert recombine(druglike, RecombineSettings(n=150, sources=300, seed=4), log=logs.append) != out


def test_a_window_no_pair_reaches_says_so_and_returns_what_it_has(druglike):
    logs = []
    out = recombine(druglike[:20], RecombineSettings(n=50, sources=20, min_weight=2000, max_weight=2100),
                    log=logs.append)
    assert out == [] and "0 molecules of the 50 asked for" in logs[-1]


@pytest.mark.parametrize("kw, word", [(dict(n=0), "n must be"), (dict(min_weight=500, max_weight=400), "min_weight"),
                                      (dict(min_qed=2), "min_qed")])
def test_settings_refuse_what_cannot_be_made(kw, word):
    with pytest.raises(ValueError, match=word):
        RecombineSettings(**kw)


def _moses_of(druglike, tmp_path, monkeypatch) -> None:
    """An empty user cache in ``tmp_path``, and the drug-like molecules as MOSES's training file."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    source = tmp_path / "train.csv.gz"
    source.write_bytes(gzip.compress(("SMILES\n" + "".join(f"{s}\n" for s in druglike)).encode()))
    monkeypatch.setattr("minitransformer.chem.datasets.moses.find_moses", lambda *a, **k: source)


def test_the_set_is_made_once_and_read_back_from_the_cache(druglike, tmp_path, monkeypatch):
    _moses_of(druglike, tmp_path, monkeypatch)
    s = RecombineSettings(n=40, sources=200, seed=1)
    made, path = recombined_moses_quietly(s)
    assert len(made) == 40 and path.endswith(f"recombined-{s.key()}.smi")
    monkeypatch.setattr(recombined, "recombine", lambda *a, **k: pytest.fail("made again"))
    assert recombined_moses_quietly(s) == (made, path)


@pytest.mark.parametrize("damage", ["truncated", "foreign", "edited", "headerless", "other settings"])
def test_a_cache_file_that_does_not_check_out_is_made_again(druglike, tmp_path, monkeypatch, damage):
    """The cache is trusted by its header (format, settings, count, checksum), never by its name alone."""
    _moses_of(druglike, tmp_path, monkeypatch)
    s = RecombineSettings(n=30, sources=200, seed=2)
    made, path = recombined_moses_quietly(s)
    lines = open(path).read().splitlines()
    assert lines[0].startswith("# minitransformer-recombined-v1 ") and lines[1:] == made
    bad = {"truncated": lines[:15], "foreign": ["CCO"] * 31, "edited": lines[:1] + ["CCO"] + lines[2:],
           "headerless": lines[1:], "other settings": [lines[0].replace("seed2", "seed3")] + lines[1:]}[damage]
    open(path, "w").write("\n".join(bad) + "\n")
    said = []
    again, _ = recombined.recombined_moses(s, log=said.append)
    assert again == made and "making it again" in said[0], said
    assert open(path).read().splitlines() == lines


def test_a_quick_run_makes_a_small_recombined_set_of_its_own(druglike, tmp_path, monkeypatch):
    from minitransformer.chem.datasets.data import load_source
    _moses_of(druglike, tmp_path, monkeypatch)
    loaded = load_source("recombined", limit=20)
    assert 0 < len(loaded.smiles) <= 20 and "recombined-n20-" in loaded.description


def recombined_moses_quietly(settings):
    return recombined.recombined_moses(settings, log=lambda *_: None)


def test_the_pmo_preset_trains_on_the_recombined_set_after_moses():
    from minitransformer.cli.main import build_parser
    from minitransformer.cli.train_lm import resolve_recipe
    args = build_parser().parse_args(["train", "lm", "--preset", "pmo"])
    r = resolve_recipe(args)
    assert r.data == "recombined" and args.data is None, "the recipe holds the preset's data; args is not changed"
    assert r.pretrain_data == "moses" and r.pretrain_epochs == 1
    assert r.time_budget is None and r.pretrain_mix > 0 and r.epochs == 1
    given = build_parser().parse_args(["train", "lm", "--preset", "pmo", "--data", "druglike"])
    assert resolve_recipe(given).data == "druglike"  # the user's --data is kept


def test_the_recombined_set_trains_on_all_but_its_held_out_molecules(druglike, monkeypatch):
    from minitransformer.chem.datasets import lm_data
    monkeypatch.setattr(recombined, "recombined_moses", lambda *a, **kw: (druglike[:40], "cache file"))
    monkeypatch.setattr(lm_data, "RECOMBINED_HELD_OUT", 5)
    splits = lm_data.prepare_smiles("recombined", log=lambda *_: None)
    assert (len(splits.val), len(splits.test)) == (5, 5) and len(splits.train) >= 25  # (repeats once standardized)
