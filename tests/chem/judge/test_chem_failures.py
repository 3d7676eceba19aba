"""Every invalid SMILES gets the kind of its failure; valid ones get None."""
import pytest

pytest.importorskip("rdkit")

from minitransformer.chem.judge.failures import KINDS, failure_counts, failure_kind  # noqa: E402


@pytest.mark.parametrize("smiles,kind", [
    ("CCO", None), ("C1CC1", None), ("c1ccccc1", None), ("C%12CC%12", None), ("[nH]1cccc1", None),
    ("", "empty"), ("   ", "empty"),
    ("C1CC", "unclosed ring"), ("C%12CC", "unclosed ring"), ("c1ccc2ccccc2c1C3CC", "unclosed ring"),
    ("CC(C", "parentheses"), ("CC)C", "parentheses"), ("C(=O", "parentheses"),
    ("CC==C", "syntax"), ("C=", "syntax"),
    ("C(C)(C)(C)(C)C", "valence"), ("O=O=O", "valence"),
    ("c1cccc1", "aromaticity"),
    ("CC<ring size>C", "ring size"), ("C1CC<ring size>C1", "ring size"), ("C<ring mark>C", "ring mark"),
])
def test_failure_kind(smiles, kind):
    assert failure_kind(smiles) == kind


def test_failure_counts_has_every_kind_and_counts_only_invalid():
    counts = failure_counts(["CCO", "C1CC", "C1CC", "CC(C", "c1cccc1", "", "c1ccccc1", "CC<ring size>",
                             "C1CC<ring mark>"])
    assert list(counts) == list(KINDS)
    assert counts == {"empty": 1, "ring size": 1, "ring mark": 1, "unclosed ring": 2, "parentheses": 1, "syntax": 0,
                      "valence": 0, "aromaticity": 1, "sanitization": 0, "unreadable": 0}


def test_the_kinds_add_up_to_the_invalid_samples_even_where_the_detector_sees_nothing():
    """RDKit's problem detector passes this one; sanitizing it breaks a valence (the aromatic o bonded thrice)."""
    from minitransformer.chem.judge.evaluation import evaluate_samples
    odd = "Cc1ccc(NC(=O)C2CCCo2C(=O)OC(C)(C)C)c(C)c1"
    assert failure_kind(odd) == "valence"
    samples = [odd, "CCO", "C1CC", "", "CC(C", "c1ccccc1"]
    result = evaluate_samples(samples, None)
    assert sum(failure_counts(samples).values()) == len(samples) - result["n_valid"] == 4
