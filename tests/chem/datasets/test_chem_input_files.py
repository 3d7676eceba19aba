"""Reading the user's SMILES files: encodings, separators, folders, empty and damaged files.

A UTF-8 byte-order mark or a tab must never reach a
token; a decoding error names the file and the line; a folder is called a folder;
an empty or unreadable file says so; a guessed SMILES column is announced.
"""
import gzip

import pytest

from minitransformer.chem.datasets.data import load_source, read_smiles

BOM = "\ufeff"


def test_bom_and_tabs_do_not_leak_into_smiles_or_tokens(tmp_path):
    """``--form as-is`` keeps the file's strings: they must be the bare SMILES."""
    pytest.importorskip("rdkit")
    from minitransformer.chem.datasets.lm_data import prepare_smiles
    smi = tmp_path / "mols.smi"
    smi.write_bytes((BOM + "CCOc1ccccc1CC\tname one\nCCN(CC)C(=O)c1ccccc1 two\n").encode("utf-8"))
    assert read_smiles(smi) == ["CCOc1ccccc1CC", "CCN(CC)C(=O)c1ccccc1"]
    csv = tmp_path / "mols.csv"
    csv.write_bytes((BOM + 'smiles,id\n"CCOc1ccccc1CCC\tfoo",1\n CCCCCCCCCCO ,2\n').encode("utf-8"))
    assert read_smiles(csv) == ["CCOc1ccccc1CCC", "CCCCCCCCCCO"]
    gz = tmp_path / "mols.smi.gz"
    with gzip.open(gz, "wb") as f:
        f.write((BOM + "CCOc1ccccc1CCCC\tx\n").encode("utf-8"))
    assert read_smiles(gz) == ["CCOc1ccccc1CCCC"]

    rows = [f"{'C' * (10 + i % 20)}O\tname{i}" for i in range(40)]
    big = tmp_path / "big.smi"
    big.write_bytes((BOM + "\n".join(rows) + "\n").encode("utf-8"))
    data = prepare_smiles(str(big), form="as-is", log=lambda *_: None)
    tokens = set(data.vocab.to_json()["tokens"])
    assert BOM not in tokens and "\t" not in tokens and " " not in tokens
    assert all(BOM not in s and "\t" not in s for s in data.train + data.val + data.test)


def test_labelled_csv_with_bom_and_tabbed_cells(tmp_path):
    from minitransformer.chem.datasets.properties import read_labelled
    path = tmp_path / "labels.csv"
    path.write_bytes((BOM + 'smiles,active\n"CCOc1ccccc1\tname",1\n').encode("utf-8"))
    table = read_labelled(path)
    assert table.smiles == ["CCOc1ccccc1"] and table.tasks == ["active"]


def test_decode_error_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "latin1.smi"
    path.write_bytes(b"CCO\nCCN\nCC\xe9O name\n")
    with pytest.raises(ValueError) as err:
        read_smiles(path)
    msg = str(err.value)
    assert str(path) in msg and "line 3" in msg and "UTF-8" in msg
    csv = tmp_path / "latin1.csv"
    csv.write_bytes(b"smiles\nCCO\n\xff\xfe\n")
    with pytest.raises(ValueError, match=r"line 3"):
        read_smiles(csv)
    from minitransformer.chem.datasets.properties import read_labelled
    with pytest.raises(ValueError, match=r"latin1\.csv.*line 3"):
        read_labelled(csv)


def test_a_folder_is_called_a_folder(tmp_path):
    folder = tmp_path / "mols.smi"
    folder.mkdir()
    with pytest.raises(IsADirectoryError, match="is a folder"):
        read_smiles(folder)
    from minitransformer.chem.datasets.properties import read_labelled
    with pytest.raises(IsADirectoryError, match="is a folder"):
        read_labelled(folder)


def test_a_damaged_gzip_file_is_named(tmp_path):
    path = tmp_path / "mols.csv.gz"
    path.write_bytes(b"this is not gzip at all\n")
    with pytest.raises(ValueError, match=r"mols\.csv\.gz.*gzip"):
        read_smiles(path)
    good = gzip.compress(b"smiles\n" + b"CCO\n" * 2000)
    cut = tmp_path / "cut.csv.gz"
    cut.write_bytes(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"cut\.csv\.gz.*(truncated|gzip)"):
        read_smiles(cut)


@pytest.mark.parametrize("content", [b"", b"\n\n", BOM.encode("utf-8"), b"# only a comment\n"])
def test_an_empty_file_says_it_is_empty(tmp_path, content):
    path = tmp_path / "empty.smi"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        load_source(str(path))
    assert str(path) in str(err.value) and "no SMILES" in str(err.value)


def test_an_empty_csv_says_it_is_empty(tmp_path):
    path = tmp_path / "empty.csv"
    path.write_text("smiles,name\n")
    with pytest.raises(ValueError, match=r"empty\.csv.*no SMILES"):
        load_source(str(path))


def test_a_file_of_invalid_smiles_is_named(tmp_path):
    pytest.importorskip("rdkit")
    from minitransformer.chem.datasets.lm_data import load_and_clean
    path = tmp_path / "junk.smi"
    path.write_text("C1CCCCCCCCCC\nnot_a_smiles_at_all\nXXXXXXXXXXXX\n")
    with pytest.raises(ValueError) as err:
        load_and_clean(str(path), log=lambda *_: None)
    msg = str(err.value)
    assert str(path) in msg and "not parsed by RDKit: 3" in msg


def test_a_guessed_smiles_column_is_announced_on_stderr(tmp_path, capsys):
    path = tmp_path / "mols.csv"
    path.write_text("id,canonical_smiles\n1,CCO\n")
    assert read_smiles(path) == ["CCO"]
    err = capsys.readouterr().err
    assert "'canonical_smiles'" in err and str(path) in err and len(err.strip().splitlines()) == 1
    exact = tmp_path / "exact.csv"
    exact.write_text("id,SMILES\n1,CCO\n")
    read_smiles(exact)
    assert capsys.readouterr().err == "", "an exact 'smiles' column is not a guess"


@pytest.mark.parametrize("text, line", [
    ('smiles,id\nCCO,a\n"CCN,b\nCCC,c\nc1ccccc1,d\nCC,e\nCCCC,f\n', 3),  # a quote open to the end of the file
    ('smiles,id\nCCO,a\n"CCN,b\nCCC,c"\nCC,e\n', 3),  # a quote closed lines later: the lines merge into one cell
    ('smiles,id\nCCO,a\nCCN,"b\nCCC,c\nCC",e\nCCCC,f\n', 3),  # the same in the name column
    ('smiles,id\nCCO,a\n"CCN"x,b\n', 3),  # text after a closing quote
])
def test_a_csv_quote_left_open_is_refused_at_its_line_not_merged(tmp_path, text, line):
    """A stray quote once merged every later row into one cell: six molecules were read as three."""
    from minitransformer.chem.datasets.user_files import read_user_file
    path = tmp_path / "samples.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=rf"samples.csv, line {line}: .*quote"):
        read_user_file(path)
    with pytest.raises(ValueError, match=rf"samples.csv, line {line}: "):
        read_smiles(path)
    assert _read_fine(tmp_path, 'smiles,id\n"CCO",a\n"C,C",b\n') == ["CCO", "C,C"], "well-formed quotes read"


def _read_fine(tmp_path, text):
    from minitransformer.chem.datasets.user_files import read_user_file
    path = tmp_path / "fine.csv"
    path.write_text(text)
    return read_user_file(path).smiles


@pytest.mark.parametrize("name, payload", [
    ("zeros.smi", b"\x00" * 200_000),
    ("late.smi", b"CCO\n" * 50_000 + b"CC\x00N\n"),
    ("zeros.csv", b"smiles\n" + b"\x00" * 1000),
    ("zeros.smi.gz", gzip.compress(b"\x00" * 200_000, mtime=0)),
])
def test_a_file_with_nul_bytes_is_refused_not_read_as_one_sample(tmp_path, name, payload):
    from minitransformer.chem.datasets.user_files import read_user_file
    (tmp_path / name).write_bytes(payload)
    with pytest.raises(ValueError, match=rf"{name}, line \d+: a NUL byte"):
        read_user_file(tmp_path / name)


def test_a_fifo_or_an_oversized_file_is_refused_before_reading(tmp_path, monkeypatch):
    import os

    from minitransformer.chem.datasets import smiles_files
    from minitransformer.chem.datasets.user_files import read_user_file
    os.mkfifo(tmp_path / "pipe.smi")  # reading it would wait for a writer for ever
    with pytest.raises(ValueError, match="pipe.smi is not a regular file"):
        read_user_file(tmp_path / "pipe.smi")
    (tmp_path / "big.smi").write_text("CCO\n" * 100)
    (tmp_path / "bomb.smi.gz").write_bytes(gzip.compress(b"C\n" * 1000))
    monkeypatch.setattr(smiles_files, "MAX_TEXT_BYTES", 300)
    with pytest.raises(ValueError, match="big.smi holds 400 bytes, above the 300"):
        read_user_file(tmp_path / "big.smi")
    with pytest.raises(ValueError, match="bomb.smi.gz inflates to more than 300 bytes"):
        read_user_file(tmp_path / "bomb.smi.gz")


def test_a_salt_and_its_parent_train_as_one_molecule(tmp_path):
    """Standardizing makes a salt its parent: the training split keeps each molecule once (the
    log says how many repeats went), while validation and test are left as split."""
    pytest.importorskip("rdkit")
    from minitransformer.chem.datasets.lm_data import prepare_smiles
    parents = [f"{'C' * (8 + i)}C(=O)O" for i in range(16)]
    salts = [s[:-1] + "[O-].[Na+]" for s in parents[:4]]
    smi = tmp_path / "mols.smi"
    smi.write_text("\n".join(parents[:8] + salts + parents[8:]) + "\n")
    said = []
    data = prepare_smiles(str(smi), form="canonical", log=said.append)
    assert len(data.train) == len(set(data.train)) == 12, data.train
    assert any("(4 repeats of a training molecule dropped)" in line for line in said), said
    plain = prepare_smiles(str(smi), form="as-is", check_rdkit=False, log=lambda *_: None)
    assert len(plain.train) == 16  # unstandardized strings are kept as the file has them
