"""Scoring components, desirability transforms and their weighted mean, against hand-computed values."""
import math

import numpy as np
import pytest

pytest.importorskip("rdkit")

from minitransformer.chem.goals.objectives import Component, Objective, ScoreFunctionFailed, transform  # noqa: E402

ASPIRIN = "CC(=O)Oc1ccccc1C(=O)O"


def test_transforms_by_hand():
    assert transform([1, 5, 10], "step", 2, 8).tolist() == [0.0, 1.0, 0.0]
    high = 1 / (1 + 10 ** (-10 * 0.25 * 0.5))  # x = high: half the range above the middle
    np.testing.assert_allclose(transform([5, 8], "sigmoid", 2, 8), [0.5, high], rtol=1e-12)
    np.testing.assert_allclose(transform([5, 8], "reverse_sigmoid", 2, 8), [0.5, 1 - high], rtol=1e-12)
    plateau = transform([0.0, 5.0, 20.0], "double_sigmoid", 4, 6)
    assert plateau[1] > 0.85 and plateau[0] < 0.01 and plateau[2] < 0.01
    assert transform([np.nan, 0.3], "none").tolist() == [0.0, 0.3], "an invalid molecule's NaN scores 0"
    far = transform([1e6, -1e6], "sigmoid", 0, 1)
    assert far[0] == 1.0 and 0 <= far[1] < 1e-200, "no overflow far from the middle"


def test_components_by_hand():
    smiles = [ASPIRIN, "CCO", "c1ccccc1", "xx"]
    from minitransformer.chem._rdkit import mol_from_smiles
    mols = [mol_from_smiles(s) for s in smiles]
    qed = Component("qed").raw(smiles, mols)
    assert qed[0] == pytest.approx(0.5501, abs=1e-4) and math.isnan(qed[3])
    assert Component("mw", low=0, high=500).raw(smiles, mols)[1] == pytest.approx(46.069, abs=1e-3)
    sim = Component("similarity", params={"query": ASPIRIN}).raw(smiles, mols)
    assert sim[0] == 1.0 and 0 <= sim[1] < 0.2
    assert Component("smarts", params={"pattern": "c1ccccc1"}).raw(smiles, mols)[:3].tolist() == [1, 0, 1]
    assert Component("forbid", params={"pattern": "c1ccccc1"}).raw(smiles, mols)[:3].tolist() == [0, 1, 0]
    sa = Component("sa", low=2, high=6).raw(smiles, mols)
    assert sa[2] == 1.0 and all(1 <= v <= 10 for v in sa[:3]), sa  # benzene: the easiest
    taxol = ("CC1=C2C(C(=O)C3(C(CC4C(C3C(C(C2(C)C)(CC1OC(=O)C(C(C5=CC=CC=C5)NC(=O)C6=CC=CC=C6)O)O)OC(=O)C7=CC=CC=C7)"
             "(CO4)OC(=O)C)O)C)OC(=O)C")
    assert Component("sa", low=2, high=6).raw([taxol], [mol_from_smiles(taxol)])[0] > 5, "a natural product is hard"


def test_the_means_and_invalid_samples():
    qed = Component("qed")
    benzene = Component("smarts", params={"pattern": "c1ccccc1"})
    geo = Objective([qed, benzene], mean="geometric")
    scores, parts = geo([ASPIRIN, "CCO", "xx", ""])
    assert scores[1] == 0.0, "geometric: one component at 0 makes the score 0"
    assert scores[0] == pytest.approx(math.sqrt(parts["qed"][0] * 1.0))
    assert scores[2] == scores[3] == 0.0, "an invalid or empty sample scores 0"
    arith = Objective([Component("qed", weight=3.0), benzene], mean="arithmetic")
    s, p = arith([ASPIRIN, "CCO"])
    assert s[1] == pytest.approx(3 * p["qed"][1] / 4)


@pytest.mark.parametrize("make, message", [
    (lambda: Component("toxicity"), "unknown score component 'toxicity'"),
    (lambda: Component("smarts", params={"pattern": "c1ccc("}), "is not a valid SMARTS"),
    (lambda: Component("similarity", params={"query": "C1CC"}), "is not a valid SMILES"),
    (lambda: Component("mw", kind="sigmoid"), "needs low < high"),
    (lambda: Component("qed", weight=0), "weight must be a finite number > 0"),
    (lambda: Objective([]), "at least one component"),
])
def test_bad_components_are_refused_in_one_line(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        make()


@pytest.mark.parametrize("values, said", [
    ([1.5, 0.5], "returned 1.5 for CCO"),
    ([0.5, -0.1], "returned -0.1 for CCN"),
    ([0.5, float("nan")], "NaN or infinity for 1 of them (first: CCN)"),
    ([float("inf"), float("nan")], "NaN or infinity for 2 of them (first: CCO)"),
    ([0.5], "returned shape (1,)"),
])
def test_a_user_function_out_of_range_is_a_runtime_failure_naming_the_value(values, said):
    bad = Objective([Component("user", params={"function": lambda smiles: values})])
    with pytest.raises(ScoreFunctionFailed, match=r"finite scores in \[0, 1\], one per valid molecule") as err:
        bad(["CCO", "CCN"])
    assert said in str(err.value)


def test_a_user_function_sees_only_the_valid_molecules():
    """An invalid or empty sample never reaches the function (it would fail on RDKit's None);
    it scores 0 and keeps its place."""
    seen = []
    good = Objective([Component("user", params={"function": lambda smiles: seen.extend(smiles) or
                                                [0.25] * len(smiles)})])
    assert good(["CCO", "xx", "", "CCN"])[0].tolist() == [0.25, 0.0, 0.0, 0.25]
    assert seen == ["CCO", "CCN"]
    calls = []
    none_valid = Objective([Component("user", params={"function": lambda smiles: calls.append(smiles) or []})])
    assert none_valid(["xx", ""])[0].tolist() == [0.0, 0.0] and calls == []
