"""Labelled SMILES tables (Tox21 and CSV files) and the scaffold split."""
import numpy as np
import pytest

pytest.importorskip("rdkit")

from minitransformer.chem.datasets.properties import (  # noqa: E402
    TOX21_TASKS, load_labelled, murcko_scaffold, read_labelled, scaffold_split,
)


def _write(tmp_path, text, name="labels.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_read_labelled_keeps_missing_labels_as_nan(tmp_path):
    path = _write(tmp_path, "mol_id,smiles,A,B\nm1,CCO,1,\nm2,c1ccccc1,0.0,1.0\n")
    table = read_labelled(path)
    assert table.tasks == ["A", "B"], "mol_id must not be read as a task"
    assert table.smiles == ["CCO", "c1ccccc1"]
    np.testing.assert_array_equal(np.isnan(table.labels), [[False, True], [False, False]])
    assert table.labels[0, 0] == 1.0 and table.labels[1, 1] == 1.0


def test_load_labelled_drops_junk_rows_with_their_labels(tmp_path):
    path = _write(tmp_path, "smiles,A,B\nCCO,1,0\nnot_a_molecule,1,1\n,0,0\nCCN,,\nCCCl,0,1\n")
    table = load_labelled(path, log=lambda *_: None)
    assert table.smiles == ["CCO", "CCCl"], "unparsable, empty and unlabelled rows must go"
    np.testing.assert_array_equal(table.labels, [[1, 0], [0, 1]])
    assert "not parsed by RDKit: 1" in table.clean_summary and "without any label" in table.clean_summary


@pytest.mark.parametrize("text, match", [
    ("smiles,A\nCCO,2\n", "not 0 or 1"),
    ("smiles,A\nCCO,yes\n", "not a number"),
    ("name,A\nCCO,1\n", "no SMILES column"),
    ("smiles\nCCO\n", "no label columns"),
])
def test_bad_tables_name_the_problem(tmp_path, text, match):
    with pytest.raises(ValueError, match=match):
        read_labelled(_write(tmp_path, text))


def test_missing_file_and_unlabelled_sources_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.csv"):
        load_labelled(tmp_path / "nope.csv", log=lambda *_: None)
    with pytest.raises(ValueError, match="no property labels"):
        load_labelled("druglike", log=lambda *_: None)
    with pytest.raises(ValueError, match="no label column"):
        read_labelled(_write(tmp_path, "smiles,A\nCCO,1\n"), tasks=["B"])


def test_murcko_scaffold_strips_side_chains():
    assert murcko_scaffold("CCc1ccccc1") == "c1ccccc1"
    assert murcko_scaffold("Oc1ccc(CC2CCNCC2)cc1") == murcko_scaffold("c1ccc(CC2CCNCC2)cc1")
    assert murcko_scaffold("CCCCO") == ""


def test_scaffold_split_keeps_each_scaffold_in_one_split():
    smiles = (["CCc1ccccc1", "Oc1ccccc1", "Nc1ccccc1", "Clc1ccccc1", "Cc1ccccc1", "CCc1ccccc1O"]  # benzene x6
              + ["C1CCCCC1C", "C1CCCCC1O"]  # cyclohexane x2
              + ["CCO", "CCN"]  # acyclic x2
              + ["c1ccncc1", "c1ccoc1C"])  # pyridine, furan
    train, val, test = scaffold_split(smiles, (0.6, 0.2, 0.2))
    assert sorted(train + val + test) == list(range(len(smiles)))
    assert set(range(6)) <= set(train), "the largest scaffold group goes to training first"
    where = {i: name for name, part in (("train", train), ("val", val), ("test", test)) for i in part}
    scaffolds = [murcko_scaffold(s) for s in smiles]
    for i in range(len(smiles)):
        for j in range(len(smiles)):
            if scaffolds[i] == scaffolds[j]:
                assert where[i] == where[j], f"{smiles[i]} and {smiles[j]} share a scaffold but not a split"
    assert len(train) <= 0.6 * len(smiles)
    with pytest.raises(ValueError, match="fractions"):
        scaffold_split(smiles, (0.5, 0.5, 0.5))


def test_real_tox21_table(tox21_path):
    table = load_labelled(str(tox21_path.parent / "tox21.csv.gz"), log=lambda *_: None)
    assert table.tasks == list(TOX21_TASKS)
    assert table.labels.shape == (len(table.smiles), 12)
    assert 7000 < len(table.smiles) <= 7831
    missing = np.isnan(table.labels).mean()
    assert 0.1 < missing < 0.3, f"Tox21 should miss about 17% of its labels, got {missing:.3f}"
