"""PMO's account of oracle calls and its AUC top-10, against hand-computed values."""
import numpy as np
import pytest

pytest.importorskip("rdkit")

from minitransformer.chem.goals.oracle_budget import BudgetExhausted, OracleBudget, auc_top10  # noqa: E402


def test_auc_by_hand():
    # top-10 mean 0.5 at 100 calls, 1.0 at 200, budget 400: trapezoids 0..100 (0 -> 0.5) = 25,
    # 100..200 (0.5 -> 1) = 75, then held at 1 for 200 more calls = 200; (25 + 75 + 200) / 400
    assert auc_top10([(100, 0.5), (200, 1.0)], 400) == pytest.approx(0.75)
    assert auc_top10([], 100) == 0.0
    assert auc_top10([(10, 1.0)], 10) == pytest.approx(0.5), "a straight line from (0, 0)"


def test_only_distinct_valid_molecules_count():
    calls = []

    def score(smiles):
        calls.append(list(smiles))
        return [len(s) / 10 for s in smiles]

    oracle = OracleBudget(score, budget=5, log_every=2)
    out = oracle(["CCO", "OCC", "xx", "", "CCCC"])
    assert out.tolist() == [0.3, 0.3, 0.0, 0.0, 0.4] and oracle.calls == 2, "OCC is CCO; xx and '' are invalid"
    assert calls == [["CCO", "CCCC"]], "each distinct molecule scored once"
    assert oracle.curve == [(2, pytest.approx(0.35))]
    out = oracle(["CCO", "CCCCC", "CCCCCC", "CCCCCCC", "CCCCCCCC"])  # 1 repeat, then room for 3 more
    assert oracle.calls == 5 and out.tolist() == [0.3, 0.5, 0.6, 0.7, 0.0], "the molecule past the budget scores 0"
    assert oracle.curve[-1] == (4, pytest.approx(np.mean([0.3, 0.4, 0.5, 0.6])))
    assert oracle.exhausted and oracle(["CCO"]).tolist() == [0.3], "a repeat is free even when the budget is spent"
    with pytest.raises(BudgetExhausted):
        oracle(["CCN"])


def test_the_top10_is_of_the_best_ten_and_the_auc_adds_the_last_point():
    oracle = OracleBudget(lambda s: [float(x.count("C")) / 20 for x in s], budget=100, log_every=10)
    oracle(["C" * n for n in range(1, 13)])  # 12 molecules scored 0.05 .. 0.60
    assert oracle.curve == [(10, pytest.approx(np.mean(np.arange(1, 11) / 20)))]
    assert oracle.top10_mean() == pytest.approx(np.mean(np.arange(3, 13) / 20))
    want = auc_top10([(10, np.mean(np.arange(1, 11) / 20)), (12, np.mean(np.arange(3, 13) / 20))], 100)
    assert oracle.auc() == pytest.approx(want)


def test_a_scoring_function_that_returns_nan_is_refused():
    with pytest.raises(ValueError, match="finite ones expected"):
        OracleBudget(lambda s: [float("nan")] * len(s))(["CCO"])
