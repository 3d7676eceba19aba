"""Standardization: salts, charges, metals, and clean molecules left alone."""
import pytest

pytest.importorskip("rdkit")

from minitransformer.chem.datasets.standardize import standardize, standardize_all  # noqa: E402


def test_salts_are_desalted_and_neutralised():
    assert standardize("[Na+].[O-]C(=O)c1ccccc1") == ("O=C(O)c1ccccc1", {"desalted", "neutralised"})
    assert standardize("C[NH3+].[Cl-]") == ("CN", {"desalted", "neutralised"})
    # a quaternary ammonium has no neutral form: it keeps its charge
    assert standardize("C[N+](C)(C)C.[Cl-]") == ("C[N+](C)(C)C", {"desalted"})


def test_metals():
    # a metal bonded to oxygen is disconnected, then dropped with the other fragments
    assert standardize("CC(=O)O[Na]") == ("CC(=O)O", {"metal disconnected", "desalted", "neutralised"})
    # a metal-carbon bond stays: the organic fragment still holds a metal, so the molecule is dropped
    assert standardize("c1ccccc1[Hg]Cl") == (None, {"metal in organic fragment"})
    assert standardize("Cl[Pt](Cl)(N)N") == (None, {"no organic fragment"})  # cisplatin


def test_clean_molecules_unchanged_and_the_report():
    clean = ["CC(=O)Oc1ccccc1C(=O)O", "C1=CC=CC=C1O"]  # the second in Kekule form stays as written
    assert standardize(clean[0]) == (clean[0], set())
    kept, report = standardize_all(clean + ["[Na+].[O-]C(=O)C", "xx", "c1ccccc1[Hg]Cl"])
    assert kept == clean + ["CC(=O)O"]
    assert report.n_in == 5 and report.n_changed == 1
    assert report.changes == {"desalted": 1, "neutralised": 1}
    assert report.dropped == {"unparseable": 1, "metal in organic fragment": 1}
    line = report.summary()
    assert "1 desalted" in line and "2 dropped" in line and "\n" not in line
