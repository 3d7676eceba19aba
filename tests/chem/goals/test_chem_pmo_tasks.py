"""The PMO tasks' scoring functions against values computed by hand from their published definitions."""
import math

import numpy as np
import pytest

pytest.importorskip("rdkit")

from rdkit import Chem  # noqa: E402
from rdkit.Chem import Crippen, rdMolDescriptors  # noqa: E402

from minitransformer.chem.goals import pmo_tasks as P  # noqa: E402


def score(task, smiles):
    return float(P.get_task(task)([smiles])[0])


def desc(smiles, name):
    mol = Chem.MolFromSmiles(smiles)
    return {"logp": Crippen.MolLogP(mol), "tpsa": rdMolDescriptors.CalcTPSA(mol)}[name]


def counts_tanimoto(a, b):
    """Tanimoto of count vectors, written out: sum of minima over sum of maxima."""
    a, b = a.GetNonzeroElements(), b.GetNonzeroElements()
    keys = set(a) | set(b)
    return sum(min(a.get(k, 0), b.get(k, 0)) for k in keys) / sum(max(a.get(k, 0), b.get(k, 0)) for k in keys)


# --------------------------------------------------------------------------- the pieces
def test_modifiers_by_hand():
    assert P.clipped(0.6, 0.75) == pytest.approx(0.8) and P.clipped(0.9, 0.75) == 1.0 and P.clipped(-1, 1) == 0
    assert P.gaussian(3, 3, 0.5) == 1.0 and P.gaussian(2, 3, 0.5) == pytest.approx(math.exp(-2))
    assert P.min_gaussian(0.5, 1, 1) == 1.0 and P.min_gaussian(2, 1, 1) == pytest.approx(math.exp(-0.5))
    assert P.max_gaussian(110, 100, 10) == 1.0 and P.max_gaussian(90, 100, 10) == pytest.approx(math.exp(-0.5))


def test_formulas_and_atom_counts():
    assert P.parse_formula("C9H10N2O2PF2Cl") == {"C": 9, "H": 10, "N": 2, "O": 2, "P": 1, "F": 2, "Cl": 1}
    assert P.parse_formula("CH4") == {"C": 1, "H": 4}
    for bad in ("", "c7h8", "C7H8?", "7C"):
        with pytest.raises(ValueError, match="molecular formula"):
            P.parse_formula(bad)
    assert P.atom_counts(Chem.MolFromSmiles("CCO")) == {"C": 2, "H": 6, "O": 1}
    assert P.atom_counts(Chem.MolFromSmiles("c1cc[nH]c1")) == {"C": 4, "H": 5, "N": 1}, "the [nH] hydrogen counts"
    assert P.atom_counts(Chem.MolFromSmiles("[NH4+]")) == {"N": 1, "H": 4}


def test_isomer_score_by_hand():
    formula = P.parse_formula("C7H8N2O2")
    # 2-methyl-5-nitroaniline is C7H8N2O2: every count right
    assert P.isomer_score(Chem.MolFromSmiles("Cc1ccc(N)cc1[N+](=O)[O-]"), formula) == pytest.approx(1.0)
    # benzene C6H6: C 6 for 7 (e^-0.5), H 6 for 8 (e^-2), N and O 0 for 2 (e^-2 each), 12 atoms for 19
    # (sigma 2: e^-6.125); the geometric mean of five: e^-(0.5 + 2 + 2 + 2 + 6.125)/5
    assert P.isomer_score(Chem.MolFromSmiles("c1ccccc1"), formula) == pytest.approx(math.exp(-12.625 / 5))


def test_tanimoto_is_the_tanimoto_of_counts():
    mols = [Chem.MolFromSmiles(s) for s in (P.CELECOXIB, P.ALBUTEROL, "CCO", "c1ccccc1O")]
    for kind in ("ECFP4", "ECFP6", "FCFP4", "AP"):
        fps = [P.fingerprint(m, kind) for m in mols]
        for a in fps:
            for b in fps:
                assert P.tanimoto(a, b) == pytest.approx(counts_tanimoto(a, b), abs=1e-12), kind
        assert counts_tanimoto(fps[0], fps[1]) < 1.0 and P.tanimoto(fps[0], fps[0]) == 1.0
    # counts, not bits: ethane's methyl environment is there twice (its one bond, seen from both ends, once)
    ethane, butane = (P.fingerprint(Chem.MolFromSmiles(s), "ECFP4") for s in ("CC", "CCCC"))
    assert sorted(ethane.GetNonzeroElements().values()) == [1, 2]
    with pytest.raises(ValueError, match="unknown fingerprint"):
        P.fingerprint(mols[0], "MACCS")
    assert 0 < P.tanimoto(ethane, butane) < 1


# --------------------------------------------------------------------------- each task, by hand
def test_targets_score_one_where_the_task_says_so():
    for task, target in [("celecoxib_rediscovery", P.CELECOXIB), ("troglitazone_rediscovery", P.TROGLITAZONE),
                         ("thiothixene_rediscovery", P.THIOTHIXENE), ("albuterol_similarity", P.ALBUTEROL),
                         ("mestranol_similarity", P.MESTRANOL),
                         ("isomers_c7h8n2o2", "Cc1ccc(N)cc1[N+](=O)[O-]")]:
        assert score(task, target) == pytest.approx(1.0), task
    # a molecule MOSES could make for C9H10N2O2PF2Cl, which needs the phosphorus MOSES lacks
    isomer = "CC(C)c1cc(N)c(Cl)cc1N(=O)=O"  # C9H11ClN2O2 (no P, no F): three counts off
    mol = Chem.MolFromSmiles(isomer)
    assert P.atom_counts(mol) == {"C": 9, "H": 11, "Cl": 1, "N": 2, "O": 2}
    # C 9/9, H 11/10 (e^-0.5), N 2/2, O 2/2, P 0/1 (e^-0.5), F 0/2 (e^-2), Cl 1/1, total 25/27 (e^-0.5)
    assert score("isomers_c9h10n2o2pf2cl", isomer) == pytest.approx(math.exp(-(0.5 + 0.5 + 2 + 0.5) / 8))


def test_median_and_mpo_tasks_on_their_own_targets():
    # median1 of menthol: sqrt(1 * sim(menthol, camphor)) on ECFP4 counts
    menthol, camphor = (P.fingerprint(Chem.MolFromSmiles(s), "ECFP4") for s in (P.MENTHOL, P.CAMPHOR))
    assert score("median1", P.MENTHOL) == pytest.approx(math.sqrt(counts_tanimoto(menthol, camphor)))
    tada, sild = (P.fingerprint(Chem.MolFromSmiles(s), "ECFP6") for s in (P.TADALAFIL, P.SILDENAFIL))
    assert score("median2", P.SILDENAFIL) == pytest.approx(math.sqrt(counts_tanimoto(tada, sild)))
    # perindopril has no aromatic ring: sqrt(1 * e^-0.5 (0 - 2)^2 / 0.25) = e^-4
    assert score("perindopril_mpo", P.PERINDOPRIL) == pytest.approx(math.exp(-4))
    # amlodipine has two rings (benzene, dihydropyridine): sqrt(1 * e^-0.5 (2 - 3)^2 / 0.25) = e^-1
    assert score("amlodipine_mpo", P.AMLODIPINE) == pytest.approx(math.exp(-1))
    # zaleplon is C17H15N5O against C19H17N3O2: C e^-2, H e^-2, N e^-2, O e^-0.5, total 38/41 e^-1.125
    assert score("zaleplon_mpo", P.ZALEPLON) == pytest.approx(math.exp(-(2 + 2 + 2 + 0.5 + 1.125) / 5 / 2))
    # sitagliptin against itself: similarity 1 is 10 sigmas from 0 (e^-50), logP, TPSA, formula all 1
    assert score("sitagliptin_mpo", P.SITAGLIPTIN) == pytest.approx(math.exp(-50 / 4), rel=1e-9)
    # osimertinib: FCFP4 clipped 1; ECFP6 1 is above 0.85 (e^-0.5 * 1.5^2); TPSA below 100; logP above 1
    tpsa, logp = desc(P.OSIMERTINIB, "tpsa"), desc(P.OSIMERTINIB, "logp")
    parts = [1.0, math.exp(-1.125), math.exp(-0.5 * ((tpsa - 100) / 10) ** 2), math.exp(-0.5 * (logp - 1) ** 2)]
    assert tpsa < 100 and logp > 1
    assert score("osimertinib_mpo", P.OSIMERTINIB) == pytest.approx(np.prod(parts) ** 0.25)
    tpsa, logp = desc(P.FEXOFENADINE, "tpsa"), desc(P.FEXOFENADINE, "logp")
    parts = [1.0, math.exp(-0.5 * ((tpsa - 90) / 10) ** 2) if tpsa < 90 else 1.0,
             math.exp(-0.5 * (logp - 4) ** 2) if logp > 4 else 1.0]
    assert score("fexofenadine_mpo", P.FEXOFENADINE) == pytest.approx(np.prod(parts) ** (1 / 3))
    # ranolazine: AP 1, logP far below 7, TPSA below 95, no fluorine (e^-0.5)
    tpsa, logp = desc(P.RANOLAZINE, "tpsa"), desc(P.RANOLAZINE, "logp")
    parts = [1.0, math.exp(-0.5 * (logp - 7) ** 2), math.exp(-0.5 * ((tpsa - 95) / 20) ** 2), math.exp(-0.5)]
    assert score("ranolazine_mpo", P.RANOLAZINE) == pytest.approx(np.prod(parts) ** 0.25)


def test_valsartan_smarts_by_hand():
    assert score("valsartan_smarts", P.SITAGLIPTIN) == 0.0, "sitagliptin lacks the valsartan SMARTS"
    valsartan = "CCCCC(=O)N(Cc1ccc(-c2ccccc2-c2nn[nH]n2)cc1)[C@@H](C(C)C)C(=O)O"
    logp, tpsa = desc(valsartan, "logp"), desc(valsartan, "tpsa")
    from rdkit.Chem import GraphDescriptors
    bertz = GraphDescriptors.BertzCT(Chem.MolFromSmiles(valsartan))
    ref = Chem.MolFromSmiles(P.SITAGLIPTIN_VALSARTAN)
    parts = [1.0, math.exp(-0.5 * ((logp - Crippen.MolLogP(ref)) / 0.2) ** 2),
             math.exp(-0.5 * ((tpsa - rdMolDescriptors.CalcTPSA(ref)) / 5) ** 2),
             math.exp(-0.5 * ((bertz - GraphDescriptors.BertzCT(ref)) / 30) ** 2)]
    assert score("valsartan_smarts", valsartan) == pytest.approx(np.prod(parts) ** 0.25)


def test_hops_by_hand():
    # the start molecule: pharmacophore 1, but it has both decorations (0, 0) and the scaffold (1): 2/4
    assert score("deco_hop", P.HOP_START) == pytest.approx(0.5)
    # scaffold_hop: pharmacophore 1, the decoration 1, the scaffold is still there (0): 2/3
    assert score("scaffold_hop", P.HOP_START) == pytest.approx(2 / 3)
    # the start without its sulfone and with its benzothiazole amine made a phenol: both decorations gone
    hopped = "CCCOc1cc2ncnc(Nc3ccccc3)c2cc1C"
    pharm = P.tanimoto(P.fingerprint(Chem.MolFromSmiles(hopped), "PHCO"),
                       P.fingerprint(Chem.MolFromSmiles(P.HOP_START), "PHCO"))
    assert score("deco_hop", hopped) == pytest.approx((min(pharm / 0.85, 1) + 1 + 1 + 1) / 4)


def test_qed_is_rdkits_published_value():
    assert score("qed", "CC(=O)Oc1ccccc1C(=O)O") == pytest.approx(0.5501, abs=1e-4)  # aspirin


# --------------------------------------------------------------------------- all tasks
@pytest.mark.parametrize("name", P.TASKS)
def test_every_task_scores_in_unit_interval_and_invalid_as_zero(name):
    task = P.get_task(name)
    values = task([P.CELECOXIB, "CCO", "not a smiles", "", "C1CC", P.HOP_START])
    assert values.shape == (6,) and np.all((values >= 0) & (values <= 1))
    assert values[2] == values[3] == values[4] == 0.0


def test_the_twenty_tasks_and_unknown_names():
    assert len(P.TASKS) == 20 and list(P.TASKS) == sorted(P.TASKS)
    with pytest.raises(ValueError, match="unknown PMO task 'drd2'"):
        P.get_task("drd2")
