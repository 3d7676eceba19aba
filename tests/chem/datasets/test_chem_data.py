"""Reading, cleaning, splitting and randomizing SMILES (small fixture files in tmp_path)."""
import gzip

import numpy as np
import pytest

from minitransformer.chem.datasets import data as chem_data
from minitransformer.chem.datasets.data import (clean_smiles, read_smiles, split_in_order,
                                       split_random)


# ------------------------------------------------------------------------ reading
def test_read_csv_finds_smiles_column_in_any_case(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text('id,SMILES,label\n1,CCO,0\n2," c1ccccc1 ",1\n3,,0\n4,"C(C)Cl",1\n')
    assert read_smiles(path) == ["CCO", "c1ccccc1", "", "C(C)Cl"]


def test_read_csv_gz_and_canonical_smiles_column(tmp_path):
    path = tmp_path / "mols.csv.gz"
    with gzip.open(path, "wt") as f:
        f.write("name,canonical_smiles\na,CCN\nb,CCC\n")
    assert read_smiles(path) == ["CCN", "CCC"]


def test_read_csv_prefers_exact_smiles_column(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text("canonical_smiles,smiles\nX,CCO\n")
    assert read_smiles(path) == ["CCO"]


@pytest.mark.parametrize("header, named", [("smiles,smiles", "'smiles' (column 1), 'smiles' (column 2)"),
                                           ("id,Smiles,SMILES", "'Smiles' (column 2), 'SMILES' (column 3)"),
                                           ("canonical_smiles,isomeric_smiles", "'canonical_smiles' (column 1)")])
def test_two_columns_that_could_hold_the_smiles_are_refused_naming_both(tmp_path, header, named):
    """Which column holds the molecules is the user's to say: the first one never wins silently."""
    path = tmp_path / "mols.csv"
    path.write_text(f"{header}\n" + ",".join(["CCO", "CCN", "CCC"][:header.count(",") + 1]) + "\n")
    with pytest.raises(ValueError, match="columns could hold the SMILES") as err:
        read_smiles(path)
    assert named in str(err.value)
    path.write_text("x,Structure,STRUCTURE\n1,CCO,CCN\n")
    with pytest.raises(ValueError, match="2 columns are named 'structure'"):
        read_smiles(path, column="structure")


def test_a_labelled_table_with_one_task_in_two_columns_is_refused(tmp_path):
    from minitransformer.chem.datasets.properties import load_labelled
    path = tmp_path / "labels.csv"
    path.write_text("smiles,NR-AR,SR-p53,NR-AR\nCCO,1,0,0\nCCN,0,1,1\n")
    with pytest.raises(ValueError, match="'NR-AR' appears 2 times"):
        load_labelled(path)
    from minitransformer.chem.datasets.properties import read_labelled
    with pytest.raises(ValueError, match="'NR-AR' appears 2 times"):  # the tasks named, as Tox21 names its twelve
        read_labelled(path, tasks=["NR-AR", "SR-p53"])


def test_read_csv_explicit_column_and_headerless(tmp_path):
    path = tmp_path / "mols.csv"
    path.write_text("structure,id\nCCO,1\n")
    assert read_smiles(path, column="Structure") == ["CCO"]
    assert read_smiles(path, column=1) == ["1"]
    raw = tmp_path / "raw.csv"
    raw.write_text('"CCO","ID-1"\n"CCN","ID-2"\n')
    assert read_smiles(raw, header=False) == ["CCO", "CCN"]


def test_read_csv_without_smiles_column_lists_columns(tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("id,structure,label\n1,CCO,0\n")
    with pytest.raises(ValueError) as err:
        read_smiles(path)
    message = str(err.value)
    for column in ("id", "structure", "label"):
        assert column in message, f"error should list column {column!r}: {message}"


def test_read_smi_skips_blank_and_comment_lines(tmp_path):
    path = tmp_path / "mols.smi"
    path.write_text("# a comment\nCCO ethanol\n\n   \nc1ccccc1\tbenzene\n  #also comment\nnot_a_smiles\n")
    assert read_smiles(path) == ["CCO", "c1ccccc1", "not_a_smiles"]
    gz = tmp_path / "mols.txt.gz"
    with gzip.open(gz, "wt") as f:
        f.write("CCN\n")
    assert read_smiles(gz) == ["CCN"]


def test_read_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.csv"
    with pytest.raises(FileNotFoundError) as err:
        read_smiles(path)
    assert str(path) in str(err.value) and "tox21" in str(err.value)


def test_read_unknown_suffix(tmp_path):
    path = tmp_path / "mols.xlsx"
    path.write_text("x")
    with pytest.raises(ValueError, match="unknown file type"):
        read_smiles(path)


def test_load_source_from_path(tmp_path):
    path = tmp_path / "mols.smi"
    path.write_text("CCO\nCCN\n")
    smiles, description = chem_data.load_source(str(path))
    assert smiles == ["CCO", "CCN"] and str(path) in description


# ------------------------------------------------------------------------ cleaning
def test_clean_counts_each_reason_and_keeps_order():
    pytest.importorskip("rdkit")
    raw = [
        "CCCCCCCCCO",          # kept (10 chars)
        "",                    # empty
        "   ",                 # empty after stripping
        "CCO",                 # too short
        "C" * 101,             # too long
        "C1CCCCCCCCC",         # unclosed ring: invalid
        "c1ccccc1CCCC",        # kept
        "CC(C)(C)(C)(C)C",     # pentavalent carbon: fails sanitization
        " CCCCCCCCCCN ",       # kept, stripped
        "C" * 100,             # kept (100 chars)
    ]
    kept, report = clean_smiles(raw)
    assert kept == ["CCCCCCCCCO", "c1ccccc1CCCC", "CCCCCCCCCCN", "C" * 100]
    got = (report.total, report.kept, report.empty, report.too_short, report.too_long, report.invalid)
    assert got == (10, 4, 2, 1, 1, 2), f"(total, kept, empty, short, long, invalid) = {got}"
    assert "kept 4 of 10" in report.summary()


def test_clean_stopping_after_some_keeps_the_first_of_them_and_reads_no_further():
    raw = ["CCCCCCCCCO", "", "CCO", "c1ccccc1CCCC", "CCCCCCCCCCN", "C1CCCCCCCCC"]
    kept, report = clean_smiles(raw, stop_after=2)
    assert kept == clean_smiles(raw)[0][:2] == ["CCCCCCCCCO", "c1ccccc1CCCC"]
    assert (report.total, report.kept, report.empty, report.too_short, report.unread) == (4, 2, 1, 1, 2)
    assert "kept 2 of the first 4 of 6 SMILES" in report.summary()
    assert clean_smiles(raw, stop_after=10)[1].unread == 0, "fewer than asked for: all of it read"


def test_pretraining_molecules_of_a_quick_run_are_the_first_of_the_whole_file(tmp_path):
    pytest.importorskip("rdkit")
    from minitransformer.chem.datasets.lm_data import pretraining_smiles
    chains = ["C" * n + end for n in range(10, 60) for end in ("O", "N", "Cl")]  # 150 molecules
    benzenes = "c1ccccc1" * 12  # 96 characters; 132 in kekule form, too long: dropped after the cleaning
    path = tmp_path / "extra.smi"
    path.write_text("\n".join(chains[:20] + [benzenes] * 200 + chains[20:]) + "\n")
    exclude = set(chains[:5])
    every = pretraining_smiles(str(path), exclude, form="kekule", log=lambda line: None)
    lines = []
    assert pretraining_smiles(str(path), exclude, form="kekule", limit=10, log=lines.append) == every[:10]
    assert any("of the first 115 of 350" in line for line in lines), "the rest of the file was not read"
    # a head that loses too many molecules after the cleaning is read again, whole
    assert pretraining_smiles(str(path), exclude, form="kekule", limit=30, log=lambda line: None) == every[:30]
    assert every[:30] == chains[5:35]


def test_clean_without_rdkit_and_without_limits():
    kept, report = clean_smiles(["C1CC", "", "CCO"], min_len=None, max_len=None, check_rdkit=False)
    assert kept == ["C1CC", "CCO"] and report.empty == 1
    assert "shorter" not in report.summary()


def test_clean_raises_when_nothing_is_left():
    with pytest.raises(ValueError, match="no usable SMILES"):
        clean_smiles(["", "C"], check_rdkit=False)


def test_tox21_counts(tox21_smiles):
    """README facts: 7831 rows; 7246 with 10 <= len <= 100; RDKit parses 7823 of all rows."""
    pytest.importorskip("rdkit")
    assert len(tox21_smiles) == 7831
    by_length, report = clean_smiles(tox21_smiles, check_rdkit=False)
    assert len(by_length) == 7246, report.summary()
    assert (report.too_short, report.too_long) == (355, 230), report.summary()
    parsed, report = clean_smiles(tox21_smiles)
    assert len(parsed) == 7239 and report.invalid == 7, report.summary()
    everything, report = clean_smiles(tox21_smiles, min_len=None, max_len=None)
    assert len(everything) == 7823 and report.invalid == 8, report.summary()


def test_load_source_tox21(tox21_path):
    smiles, description = chem_data.load_source("tox21", data_dir=tox21_path.parent, download=False)
    assert len(smiles) == 7831 and "Tox21" in description


# ------------------------------------------------------------------------ sources
def test_druglike_source_is_bundled_with_rdkit():
    pytest.importorskip("rdkit")
    path = chem_data.druglike_path()
    assert path.is_file(), path
    smiles, description = chem_data.load_source("druglike")
    assert len(smiles) == 10000 and "drug-like" in description
    assert smiles[0] == "N(NC(=O)C1CCC1)c2ccc(cc2)C(C)(C)C", smiles[0]


def test_load_source_none_falls_back_to_druglike(tmp_path, monkeypatch, capsys):
    pytest.importorskip("rdkit")
    monkeypatch.delenv("MINITRANSFORMER_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    smiles, description = chem_data.load_source(None, data_dir=tmp_path, download=False)
    assert len(smiles) == 10000 and "drug-like" in description
    printed = capsys.readouterr().out.strip().splitlines()
    assert len(printed) == 1 and "Tox21" in printed[0], printed


# ------------------------------------------------------------------------ splitting
def test_split_in_order():
    items = [f"C{i}" for i in range(10)]
    train, val, test = split_in_order(items, n_train=6, n_val=3)
    assert (train, val, test) == (items[:6], items[6:9], items[9:])
    with pytest.raises(ValueError):
        split_in_order(items, n_train=8, n_val=3)


def test_split_in_order_reference_sizes(tox21_smiles):
    kept, _ = clean_smiles(tox21_smiles, check_rdkit=False)
    train, val, test = split_in_order(kept)
    assert (len(train), len(val), len(test)) == (6600, 400, 246)
    assert train[0] == kept[0] and test[-1] == kept[-1]


def test_split_random_partitions_deterministically():
    items = [f"C{i}" for i in range(101)]
    train, val, test = split_random(items, seed=3)
    assert (len(train), len(val), len(test)) == (80, 10, 11)
    assert sorted(train + val + test) == sorted(items), "splits must partition the input"
    assert split_random(items, seed=3) == (train, val, test)
    assert split_random(items, seed=4) != (train, val, test)
    assert train == sorted(train, key=items.index), "original order is kept inside a split"
    with pytest.raises(ValueError):
        split_random(items, fractions=(0.5, 0.5, 0.5))


# ------------------------------------------------------------------------ one molecule
def test_canonical():
    pytest.importorskip("rdkit")
    assert chem_data.canonical("OCC") == chem_data.canonical("C(O)C") == "CCO"
    assert chem_data.canonical("C1CC") is None
    assert chem_data.canonical("") is None
    assert chem_data.canonical("C[C@H](N)O") != chem_data.canonical("C[C@H](N)O", isomeric=False)


def test_randomize_smiles_is_valid_and_deterministic():
    pytest.importorskip("rdkit")
    smiles = "CC(=O)Oc1ccccc1C(=O)O"
    first = [chem_data.randomize_smiles(smiles, np.random.default_rng(7)) for _ in range(2)]
    assert first[0] == first[1], "same generator state must give the same string"
    rng = np.random.default_rng(0)
    variants = {chem_data.randomize_smiles(smiles, rng) for _ in range(30)}
    assert len(variants) > 5, f"expected several different strings, got {variants}"
    target = chem_data.canonical(smiles)
    assert {chem_data.canonical(v) for v in variants} == {target}


def test_randomize_keeps_stereo_and_fragments():
    pytest.importorskip("rdkit")
    rng = np.random.default_rng(1)
    for smiles in ["C[C@H](N)C(=O)O", "F/C=C/Cl", "[Na+].[O-]C(=O)c1ccccc1"]:
        target = chem_data.canonical(smiles)
        for _ in range(10):
            out = chem_data.randomize_smiles(smiles, rng)
            assert chem_data.canonical(out) == target, f"{smiles} -> {out}"


def test_randomize_in_kekule_form_writes_no_aromatic_atom():
    pytest.importorskip("rdkit")
    rng = np.random.default_rng(2)
    for smiles in ["CC(=O)Oc1ccccc1C(=O)O", "c1ccc2[nH]ccc2c1", "Cn1cnc2c1c(=O)n(C)c(=O)n2C"]:
        target = chem_data.canonical(smiles)
        outs = {chem_data.randomize_smiles(smiles, rng, kekule_form=True) for _ in range(10)}
        assert len(outs) > 3 and {chem_data.canonical(o) for o in outs} == {target}
        assert not any(ch in out for out in outs for ch in "cnos"), outs  # no lower-case aromatic atom


def test_randomize_rejects_invalid():
    pytest.importorskip("rdkit")
    with pytest.raises(ValueError, match="invalid"):
        chem_data.randomize_smiles("C1CC", np.random.default_rng(0))


# ------------------------------------------------------------------------ without RDKit
def test_missing_rdkit_gives_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "rdkit", None)  # makes `import rdkit` fail
    with pytest.raises(ImportError, match=r"Install it with: pip install rdkit"):
        chem_data.canonical("CCO")


def test_tokenizer_and_vocab_import_without_rdkit():
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'rdkit': raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import minitransformer.chem as chem\n"
        "v = chem.Vocab.build(['CCO'])\n"
        "assert v.decode(v.encode('CCO')) == 'CCO'\n"
        "assert 'rdkit' not in sys.modules\n"
    )
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_kekule_writes_the_same_molecule_without_aromatic_atoms():
    from minitransformer.chem.datasets.data import canonical, kekule
    for smiles in ["c1ccccc1O", "Cn1cnc2c1c(=O)n(C)c(=O)n2C", "c1ccc2[nH]ccc2c1", "CC(=O)Oc1ccccc1C(=O)O"]:
        k = kekule(smiles)
        assert k is not None and not any(ch in k for ch in "cnos"), f"{smiles} -> {k} still aromatic"
        assert canonical(k) == canonical(smiles), f"{smiles} -> {k} is another molecule"
    assert kekule("not a smiles") is None
