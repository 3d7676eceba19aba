"""Sample metrics on hand-checked cases, and Tanimoto/KDE against independent computations."""
import numpy as np
import pytest

pytest.importorskip("rdkit")

from rdkit import Chem, DataStructs  # noqa: E402
from rdkit.Chem import rdFingerprintGenerator  # noqa: E402

from minitransformer.chem.judge import distribution  # noqa: E402
from minitransformer.chem.judge.evaluation import evaluate_samples  # noqa: E402
from minitransformer.chem.judge.metrics import internal_diversity, novelty, uniqueness, validity  # noqa: E402
from minitransformer.chem.judge.similarity import (mean_tanimoto_powers, morgan_bits,  # noqa: E402
                                             nearest_neighbour_similarity, tanimoto_matrix)

DRUGS = [
    "CC(=O)Oc1ccccc1C(=O)O", "CN1CCC[C@H]1c1cccnc1", "CC(C)Cc1ccc(C(C)C(=O)O)cc1",
    "CN1C(=O)CN=C(c2ccccc2)c2cc(Cl)ccc21", "CC(=O)Nc1ccc(O)cc1", "O=C(O)c1ccccc1O",
    "Cn1cnc2c1c(=O)n(C)c(=O)n2C", "CCN(CC)CC(=O)Nc1c(C)cccc1C", "COc1ccc2[nH]cc(CCN)c2c1",
    "NC(=O)c1cccnc1", "CC12CCC3c4ccc(O)cc4CCC3C1CCC2O", "c1ccc2c(c1)ccc1ccccc12",
]
ALKANES = ["C" * n for n in range(1, 13)] + ["CC(C)" + "C" * n for n in range(1, 13)]


def _rdkit_tanimoto(smiles_a, smiles_b, n_bits=1024):
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=n_bits)
    fa = [gen.GetFingerprint(Chem.MolFromSmiles(s)) for s in smiles_a]
    fb = [gen.GetFingerprint(Chem.MolFromSmiles(s)) for s in smiles_b]
    return np.array([DataStructs.BulkTanimotoSimilarity(f, fb) for f in fa])


def _mols(smiles):
    return [Chem.MolFromSmiles(s) for s in smiles]


# ------------------------------------------------------------------ simple fractions
def test_validity_counts_invalid_and_empty_strings_exactly():
    samples = ["CCO", "c1ccccc1", "not a smiles", "", "C1CC", "CC(C)(C)(C)(C)C", "[Na+].[Cl-]"]
    assert validity(samples) == pytest.approx(3 / 7)
    assert validity([]) == 0.0


def test_uniqueness_counts_canonical_duplicates():
    assert uniqueness(["CCO", "OCC", "C(O)C", "c1ccccc1", "xx"]) == pytest.approx(2 / 4)
    assert uniqueness(["xx"]) == 0.0


def test_novelty_of_training_copies_is_zero():
    train = ["CCO", "c1ccccc1", "CC(=O)O"]
    assert novelty(["OCC", "c1ccccc1", "OC(C)=O"], train) == 0.0
    assert novelty(["CCN", "CCO"], train) == pytest.approx(1 / 2)
    assert novelty(["CCCN", "CCCN"], train) == 1.0


# ------------------------------------------------------------------ Tanimoto and IntDiv
def test_tanimoto_matrix_matches_rdkit():
    ours = tanimoto_matrix(morgan_bits(_mols(DRUGS)), morgan_bits(_mols(DRUGS[:5])))
    reference = _rdkit_tanimoto(DRUGS, DRUGS[:5])
    np.testing.assert_allclose(ours, reference, atol=1e-6,
                               err_msg="NumPy Tanimoto differs from RDKit BulkTanimotoSimilarity")


def test_tanimoto_of_empty_fingerprints_is_one():
    empty = np.zeros((2, 8), dtype=np.float32)
    np.testing.assert_array_equal(tanimoto_matrix(empty, empty), np.ones((2, 2)))


def test_intdiv_of_identical_molecules_is_exactly_zero():
    samples = ["CC(=O)Oc1ccccc1C(=O)O"] * 7
    assert internal_diversity(samples, p=1) == 0.0
    assert internal_diversity(samples, p=2) == 0.0
    result = evaluate_samples(samples, ["CCO", "CCN"])
    assert result["intdiv1"] == 0.0 and result["intdiv2"] == 0.0


def test_intdiv_of_two_molecules_by_hand():
    a, b = "CC(=O)Oc1ccccc1C(=O)O", "O=C(O)c1ccccc1O"
    t = _rdkit_tanimoto([a], [b])[0, 0]
    # four ordered pairs: (a,a)=1, (b,b)=1, (a,b)=(b,a)=t
    assert internal_diversity([a, b], p=1) == pytest.approx(1 - (2 + 2 * t) / 4)
    assert internal_diversity([a, b], p=2) == pytest.approx(1 - np.sqrt((2 + 2 * t * t) / 4))


def test_intdiv_blocks_agree_with_full_matrix(monkeypatch):
    from minitransformer.chem.judge import similarity

    fps = morgan_bits(_mols(DRUGS))
    full = tanimoto_matrix(fps, fps)
    monkeypatch.setattr(similarity, "_BLOCK", 5)  # force several row blocks
    got = mean_tanimoto_powers(fps, (1, 2, 3))
    np.testing.assert_allclose(got, [np.mean(full), np.mean(full ** 2), np.mean(full ** 3)], rtol=1e-6)
    nn = nearest_neighbour_similarity(fps)
    np.fill_diagonal(full, -1)
    np.testing.assert_allclose(nn, full.max(axis=1), rtol=1e-6)


# ------------------------------------------------------------------ KL score
def test_gaussian_kde_is_a_density():
    data = np.array([0.0, 1.0, 3.0])
    grid = np.linspace(-10, 13, 20001)
    density = distribution.gaussian_kde(data, grid)
    assert density.sum() * (grid[1] - grid[0]) == pytest.approx(1.0, abs=1e-6)
    one = distribution.gaussian_kde(np.array([0.0]), np.array([0.0, 1.0]), bandwidth=2.0)
    np.testing.assert_allclose(one, np.exp(-0.5 * np.array([0.0, 0.25])) / (2 * np.sqrt(2 * np.pi)))


def test_discrete_kl_by_hand():
    assert distribution.discrete_kl([1, 2, 2], [2, 1, 2]) == pytest.approx(0.0, abs=1e-9)
    # P = (1/2, 1/2) on {0, 1}; Q = (1/4, 3/4): KL = 1/2 ln 2 + 1/2 ln(2/3)
    expected = 0.5 * np.log(2) + 0.5 * np.log(2 / 3)
    assert distribution.discrete_kl([0, 1], [0, 1, 1, 1]) == pytest.approx(expected, abs=1e-8)


def test_kl_score_of_a_set_against_itself_is_one():
    assert distribution.kl_score(_mols(DRUGS), _mols(DRUGS)) == pytest.approx(1.0, abs=1e-9)


def test_kl_score_is_low_for_a_very_different_set():
    kls = distribution.kl_divergences(_mols(DRUGS), _mols(ALKANES))
    assert set(kls) == set(distribution.DESCRIPTORS) | {distribution.SIMILARITY}
    assert all(v >= 0 for v in kls.values()), kls
    score = distribution.kl_score(_mols(DRUGS), _mols(ALKANES))
    assert score < 0.4, f"drugs vs alkanes should score low, got {score:.3f} ({kls})"


# ------------------------------------------------------------------ all together
def test_evaluate_samples_hand_checked():
    train = DRUGS[:8]
    samples = [DRUGS[0], DRUGS[0], "OC(=O)c1ccccc1O", DRUGS[9], DRUGS[10], "C1CC", "", "CCCCO"]
    result = evaluate_samples(samples, train)
    assert result["n_samples"] == 8 and result["n_valid"] == 6
    assert result["validity"] == pytest.approx(6 / 8)
    # distinct valid: aspirin, salicylic acid (== DRUGS[5]), nicotinamide, estradiol-like, butanol
    assert result["n_unique"] == 5 and result["uniqueness"] == pytest.approx(5 / 6)
    assert result["n_novel"] == 3 and result["novelty"] == pytest.approx(3 / 5)
    assert result["n_kl_reference"] == 8  # GuacaMol number_samples = min(8 samples, 8 training)
    for key in ("validity", "uniqueness", "novelty", "intdiv1", "intdiv2", "kl_score"):
        assert 0.0 <= result[key] <= 1.0 and isinstance(result[key], float), (key, result[key])
    assert evaluate_samples(samples, train) == result, "the same seed gives the same result"


def test_evaluate_samples_of_training_set_copy():
    result = evaluate_samples(DRUGS, DRUGS)
    assert result["validity"] == result["uniqueness"] == 1.0
    assert result["novelty"] == 0.0
    assert result["kl_score"] == pytest.approx(1.0, abs=1e-9), "the reference is the same set"


def test_kl_against_any_reference_matches_evaluate_samples():
    from minitransformer.chem.judge.metrics import kl_against
    samples = DRUGS[:6] + ["CCCCO", "xx"]
    assert kl_against(samples, DRUGS) == evaluate_samples(samples, DRUGS)["kl_score"]
    assert kl_against(DRUGS, DRUGS) == pytest.approx(1.0, abs=1e-9)
    assert kl_against(["CCCCCCCC", "CCCCCCCCCC", "CCCCCC", "CCCCCCCCCCCC"], DRUGS) < 0.5  # alkanes vs drugs
    assert kl_against(["xx"], DRUGS) is None


def test_evaluate_samples_with_nothing_valid():
    """One rule for undefined values: a fraction of an empty set is None with a note, never 0.0."""
    result = evaluate_samples(["xx", "", "C1CC"], DRUGS)
    assert result["n_valid"] == 0 and result["validity"] == 0.0, "validity of 3 samples is defined: 0 of 3"
    undefined = ("uniqueness", "novelty", "intdiv1", "intdiv2", "kl_score", "radical_fraction", "unique@1000")
    assert all(result[k] is None for k in undefined), {k: result[k] for k in undefined}
    assert all(result["notes"][k] for k in undefined), result["notes"]
    assert result["notes"]["uniqueness"] == "no valid sample"
    empty = evaluate_samples([], DRUGS)
    assert empty["validity"] is None and empty["notes"]["validity"] == "no sample"
    assert evaluate_samples(["CCO"])["novelty"] is None, "no training set: novelty is undefined"
    assert evaluate_samples(["CCO"])["notes"]["novelty"] == "no training set given"


def test_weight_is_the_wasserstein_distance_of_molecular_weights():
    """MOSES's weight metric, by hand: methane (16.043) and ethane (30.070) against propane (44.097)."""
    result = evaluate_samples(["C", "CC", "xx"], references={"ref": ["CCC"], "empty": ["xx"]}, filters=None)
    assert result["weight"]["ref"] == pytest.approx((44.097 - 16.043 + 44.097 - 30.070) / 2, abs=1e-2)
    assert result["weight"]["empty"] is None and result["notes"]["weight/empty"] == "no valid reference molecule"
    assert evaluate_samples(["CCC"], references={"ref": ["CCC", "CCC"]})["weight"]["ref"] == 0.0
    assert evaluate_samples(["xx"], references={"ref": ["CCC"]})["notes"]["weight/ref"] == "no valid sample"
