r"""The goal-directed tasks of the PMO benchmark that need only RDKit: GuacaMol's scoring functions.

PMO (Gao et al., "Sample Efficiency Matters", NeurIPS 2022) judges a molecular
optimizer on 23 tasks; 20 of them are the goal-directed benchmarks of GuacaMol
(Brown et al., "GuacaMol: Benchmarking Models for de Novo Molecular Design",
J. Chem. Inf. Model. 2019, Table 3 and its supplementary definitions) as TDC
serves them, plus QED. Each task turns a molecule into a score in [0, 1], built
from a few **terms**: a raw number (a Tanimoto similarity, a descriptor, whether
a SMARTS matches, a molecular formula's fit) passed through a **modifier**, and
the terms combined by a geometric or an arithmetic mean. An invalid SMILES
scores 0. The definitions below are the published ones, written down here; the
task names are PMO's.

Fingerprints (all *count* fingerprints, compared by the Tanimoto of counts,
:math:`\sum_i \min(a_i, b_i) / \sum_i \max(a_i, b_i)`, as GuacaMol defines them):

``ECFP4`` / ``ECFP6``
    Morgan fingerprints of radius 2 / 3, atom invariants (connectivity).
``FCFP4``
    Morgan fingerprint of radius 2 over feature invariants (donor, acceptor,
    aromatic, halogen, basic, acidic).
``AP``
    atom pairs at topological distances 1 to 10.
``PHCO``
    Gobbi and Poppinger's 2D pharmacophore fingerprint (a bit fingerprint).

Modifiers, for a raw value :math:`x`:

``clipped(u)``
    :math:`\min(\max(x / u, 0), 1)`: a similarity of :math:`u` or more is as good as 1.
``gaussian(mu, sigma)``
    :math:`\exp(-\tfrac12 ((x - \mu)/\sigma)^2)`: 1 at :math:`\mu`.
``min_gaussian(mu, sigma)``
    1 for :math:`x \le \mu`, the Gaussian above it (small values wanted).
``max_gaussian(mu, sigma)``
    1 for :math:`x \ge \mu`, the Gaussian below it (large values wanted).

The **isomer** score of a molecular formula (GuacaMol's definition, which TDC
follows since August 2022): the geometric mean of ``gaussian(n_e, 1)`` of the
count of each element :math:`e` in the formula, hydrogens included, and
``gaussian(n, 2)`` of the total number of atoms, hydrogens included. (TDC's
earlier isomer score, which PMO's published runs may have used, counted the
total from the letters of the SMILES string, without hydrogens; the formula
C7H8N2O2 names eight hydrogens, so only a count that includes them makes an
isomer score 1.)
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit

__all__ = ["TASKS", "Task", "Term", "fingerprint", "tanimoto", "clipped", "gaussian", "min_gaussian",
           "max_gaussian", "geometric_mean", "parse_formula", "atom_counts", "isomer_score", "get_task"]

FINGERPRINTS = ("ECFP4", "ECFP6", "FCFP4", "AP", "PHCO")


# --------------------------------------------------------------------------- fingerprints
@functools.lru_cache(maxsize=None)
def _generator(kind: str):
    from rdkit.Chem import rdFingerprintGenerator as G
    if kind == "ECFP4":
        return G.GetMorganGenerator(radius=2)
    if kind == "ECFP6":
        return G.GetMorganGenerator(radius=3)
    if kind == "FCFP4":
        return G.GetMorganGenerator(radius=2, atomInvariantsGenerator=G.GetMorganFeatureAtomInvGen())
    if kind == "AP":
        return G.GetAtomPairGenerator(minDistance=1, maxDistance=10)
    raise ValueError(f"unknown fingerprint {kind!r}; choose from {', '.join(FINGERPRINTS)}")


def fingerprint(mol, kind: str):
    """The ``kind`` fingerprint of an RDKit molecule (a sparse count vector; a bit vector for PHCO)."""
    if kind == "PHCO":
        from rdkit.Chem.Pharm2D import Generate, Gobbi_Pharm2D
        return Generate.Gen2DFingerprint(mol, Gobbi_Pharm2D.factory)
    return _generator(kind).GetSparseCountFingerprint(mol)


def tanimoto(a, b) -> float:
    """Tanimoto similarity of two fingerprints of the same kind (of counts, or of bits)."""
    from rdkit import DataStructs
    return float(DataStructs.TanimotoSimilarity(a, b))


# --------------------------------------------------------------------------- modifiers
def clipped(x: float, upper: float) -> float:
    return min(max(x / upper, 0.0), 1.0)


def gaussian(x: float, mu: float, sigma: float) -> float:
    return math.exp(-0.5 * ((x - mu) / sigma) ** 2)


def min_gaussian(x: float, mu: float, sigma: float) -> float:
    return 1.0 if x <= mu else gaussian(x, mu, sigma)


def max_gaussian(x: float, mu: float, sigma: float) -> float:
    return 1.0 if x >= mu else gaussian(x, mu, sigma)


def geometric_mean(values: Sequence[float]) -> float:
    r""":math:`(\prod_i v_i)^{1/n}`: 0 as soon as one value is 0 (every requirement must hold)."""
    return float(np.prod(values) ** (1.0 / len(values)))


# --------------------------------------------------------------------------- molecular formulas
def parse_formula(formula: str) -> dict[str, int]:
    """``"C9H10N2O2PF2Cl"`` -> ``{"C": 9, "H": 10, "N": 2, "O": 2, "P": 1, "F": 2, "Cl": 1}``."""
    parts = re.findall(r"([A-Z][a-z]?)(\d*)", formula)
    if not parts or "".join(e + n for e, n in parts) != formula:
        raise ValueError(f"not a molecular formula: {formula!r} (write it like C7H8N2O2)")
    counts: dict[str, int] = {}
    for element, n in parts:
        counts[element] = counts.get(element, 0) + (int(n) if n else 1)
    return counts


def atom_counts(mol) -> dict[str, int]:
    """How many atoms of each element ``mol`` has, its hydrogens (implicit ones too) included."""
    counts: dict[str, int] = {}
    for atom in mol.GetAtoms():
        counts[atom.GetSymbol()] = counts.get(atom.GetSymbol(), 0) + 1
        hydrogens = atom.GetTotalNumHs()
        if hydrogens:
            counts["H"] = counts.get("H", 0) + hydrogens
    return counts


def isomer_score(mol, formula: dict[str, int]) -> float:
    """How close ``mol`` is to the molecular ``formula`` (a :func:`parse_formula` dict), in [0, 1]."""
    have = atom_counts(mol)
    terms = [gaussian(have.get(e, 0), n, 1.0) for e, n in formula.items()]
    terms.append(gaussian(sum(have.values()), sum(formula.values()), 2.0))
    return geometric_mean(terms)


# --------------------------------------------------------------------------- descriptors
def _descriptors() -> dict[str, Callable]:
    from rdkit.Chem import Crippen, GraphDescriptors, QED, rdMolDescriptors
    return {"logp": Crippen.MolLogP,  # Wildman-Crippen logP
            "tpsa": rdMolDescriptors.CalcTPSA,  # topological polar surface area (N and O only)
            "bertz": GraphDescriptors.BertzCT,  # Bertz's complexity index
            "rings": rdMolDescriptors.CalcNumRings,  # rings of the smallest set of smallest rings
            "aromatic_rings": rdMolDescriptors.CalcNumAromaticRings,
            "fluorines": lambda mol: sum(a.GetSymbol() == "F" for a in mol.GetAtoms()),
            "qed": QED.qed}


# --------------------------------------------------------------------------- terms and tasks
def _identity(x):
    return x


@dataclass(frozen=True)
class Term:
    """One ingredient of a task: ``raw(mol)`` then ``modifier(raw)``; ``what`` says it in words."""
    what: str
    raw: Callable
    modifier: Callable = _identity

    def __call__(self, mol) -> float:
        return float(self.modifier(self.raw(mol)))


def similar_to(smiles: str, kind: str, modifier: Callable = _identity, what: str = "") -> Term:
    """The Tanimoto similarity to ``smiles`` on ``kind`` fingerprints, then ``modifier``."""
    target = fingerprint(mol_from_smiles(smiles), kind)
    return Term(what or f"{kind} Tanimoto to {smiles}", lambda mol: tanimoto(fingerprint(mol, kind), target),
                modifier)


def at_least(smiles: str, kind: str, upper: float) -> Term:
    """The Tanimoto similarity to ``smiles`` on ``kind`` fingerprints, ``upper`` and above counting as 1."""
    return similar_to(smiles, kind, lambda x: clipped(x, upper), f"{kind} Tanimoto to {smiles}, {upper} and up as 1")


def descriptor(name: str, modifier: Callable, what: str) -> Term:
    return Term(what, _descriptors()[name], modifier)


def has_smarts(pattern: str, present: bool = True) -> Term:
    """1 when the SMARTS ``pattern`` matches (``present``), or when it does not (not ``present``), else 0."""
    from rdkit import Chem
    query = Chem.MolFromSmarts(pattern)
    return Term(f"{'has' if present else 'lacks'} {pattern}",
                lambda mol: float(mol.HasSubstructMatch(query) == present))


def formula_fit(formula: str) -> Term:
    counts = parse_formula(formula)
    return Term(f"isomer score of {formula}", lambda mol: isomer_score(mol, counts))


@dataclass(frozen=True)
class Task:
    """A PMO task: ``task(smiles)`` -> scores (N,) in [0, 1], 0 for an invalid SMILES."""
    name: str
    terms: tuple
    mean: str = "geometric"  # or "arithmetic"

    def score_mol(self, mol) -> float:
        values = [t(mol) for t in self.terms]
        return float(np.mean(values)) if self.mean == "arithmetic" else geometric_mean(values)

    def __call__(self, smiles: Sequence[str]) -> np.ndarray:
        with quiet_rdkit():
            mols = [mol_from_smiles(s) if isinstance(s, str) and s else None for s in smiles]
            return np.array([self.score_mol(m) if m is not None else 0.0 for m in mols])


# The target molecules, as GuacaMol gives them.
CELECOXIB = "CC1=CC=C(C=C1)C1=CC(=NN1C1=CC=C(C=C1)S(N)(=O)=O)C(F)(F)F"
TROGLITAZONE = "Cc1c(C)c2OC(C)(COc3ccc(CC4SC(=O)NC4=O)cc3)CCc2c(C)c1O"
THIOTHIXENE = "CN(C)S(=O)(=O)c1ccc2Sc3ccccc3C(=CCCN4CCN(C)CC4)c2c1"
ALBUTEROL = "CC(C)(C)NCC(O)c1ccc(O)c(CO)c1"
MESTRANOL = "COc1ccc2[C@H]3CC[C@@]4(C)[C@@H](CC[C@@]4(O)C#C)[C@@H]3CCc2c1"
CAMPHOR, MENTHOL = "CC1(C)C2CCC1(C)C(=O)C2", "CC(C)C1CCC(C)CC1O"
TADALAFIL = "O=C1N(CC(N2C1CC3=C(C2C4=CC5=C(OCO5)C=C4)NC6=C3C=CC=C6)=O)C"
SILDENAFIL = "CCCC1=NN(C2=C1N=C(NC2=O)C3=C(C=CC(=C3)S(=O)(=O)N4CCN(CC4)C)OCC)C"
OSIMERTINIB = "COc1cc(N(C)CCN(C)C)c(NC(=O)C=C)cc1Nc2nccc(n2)c3cn(C)c4ccccc34"
FEXOFENADINE = "CC(C)(C(=O)O)c1ccc(cc1)C(O)CCCN2CCC(CC2)C(O)(c3ccccc3)c4ccccc4"
RANOLAZINE = "COc1ccccc1OCC(O)CN2CCN(CC(=O)Nc3c(C)cccc3C)CC2"
PERINDOPRIL = "O=C(OCC)C(NC(C(=O)N1C(C(=O)O)CC2CCCCC12)C)CCC"
AMLODIPINE = r"Clc1ccccc1C2C(=C(/N/C(=C2/C(=O)OCC)COCCN)C)\C(=O)OC"
SITAGLIPTIN = "Fc1cc(c(F)cc1F)CC(N)CC(=O)N3Cc2nnc(n2CC3)C(F)(F)F"
SITAGLIPTIN_VALSARTAN = "NC(CC(=O)N1CCn2c(nnc2C(F)(F)F)C1)Cc1cc(F)c(F)cc1F"  # the same molecule, written as
ZALEPLON = "O=C(C)N(CC)C1=CC=CC(C2=CC=NC3=C(C=NN23)C#N)=C1"  # GuacaMol's valsartan task writes it
HOP_START = "CCCOc1cc2ncnc(Nc3ccc4ncsc4c3)c2cc1S(=O)(=O)C(C)(C)C"  # deco_hop and scaffold_hop start here
HOP_SCAFFOLD = "[#7]-c1n[c;h1]nc2[c;h1]c(-[#8])[c;h0][c;h1]c12"  # its quinazoline core
HOP_DECORATION = "[#6]-[#6]-[#6]-[#8]-[#6]~[#6]~[#6]~[#6]~[#6]-[#7]-c1ccc2ncsc2c1"


def _target(smiles: str, name: str) -> float:
    return _descriptors()[name](mol_from_smiles(smiles))


def _build() -> dict[str, Task]:
    """The 20 tasks, each from its published definition (targets, fingerprints, modifiers, mean)."""
    g, mg, xg = gaussian, min_gaussian, max_gaussian
    sita_logp, sita_tpsa = _target(SITAGLIPTIN, "logp"), _target(SITAGLIPTIN, "tpsa")
    vals_logp, vals_tpsa = _target(SITAGLIPTIN_VALSARTAN, "logp"), _target(SITAGLIPTIN_VALSARTAN, "tpsa")
    vals_bertz = _target(SITAGLIPTIN_VALSARTAN, "bertz")
    tasks = [
        # rediscovery: the similarity itself (1 only for the target)
        Task("celecoxib_rediscovery", (similar_to(CELECOXIB, "ECFP4"),)),
        Task("troglitazone_rediscovery", (similar_to(TROGLITAZONE, "ECFP4"),)),
        Task("thiothixene_rediscovery", (similar_to(THIOTHIXENE, "ECFP4"),)),
        # similarity: at least 0.75 similar is as good as identical
        Task("albuterol_similarity", (at_least(ALBUTEROL, "FCFP4", 0.75),)),
        Task("mestranol_similarity", (at_least(MESTRANOL, "AP", 0.75),)),
        # isomers: the molecular formula
        Task("isomers_c7h8n2o2", (formula_fit("C7H8N2O2"),)),
        Task("isomers_c9h10n2o2pf2cl", (formula_fit("C9H10N2O2PF2Cl"),)),
        # median molecules: similar to two molecules at once
        Task("median1", (similar_to(MENTHOL, "ECFP4"), similar_to(CAMPHOR, "ECFP4"))),
        Task("median2", (similar_to(TADALAFIL, "ECFP6"), similar_to(SILDENAFIL, "ECFP6"))),
        # multi-property objectives
        Task("osimertinib_mpo", (
            at_least(OSIMERTINIB, "FCFP4", 0.8),
            similar_to(OSIMERTINIB, "ECFP6", lambda x: mg(x, 0.85, 0.1), "but its ECFP6 Tanimoto not above 0.85"),
            descriptor("tpsa", lambda x: xg(x, 100, 10), "TPSA of 100 or more"),
            descriptor("logp", lambda x: mg(x, 1, 1), "logP of 1 or less"))),
        Task("fexofenadine_mpo", (
            at_least(FEXOFENADINE, "AP", 0.8),
            descriptor("tpsa", lambda x: xg(x, 90, 10), "TPSA of 90 or more"),
            descriptor("logp", lambda x: mg(x, 4, 1), "logP of 4 or less"))),
        Task("ranolazine_mpo", (
            at_least(RANOLAZINE, "AP", 0.7),
            descriptor("logp", lambda x: xg(x, 7, 1), "logP of 7 or more"),
            descriptor("tpsa", lambda x: xg(x, 95, 20), "TPSA of 95 or more"),
            descriptor("fluorines", lambda x: g(x, 1, 1), "one fluorine"))),
        Task("perindopril_mpo", (
            similar_to(PERINDOPRIL, "ECFP4"),
            descriptor("aromatic_rings", lambda x: g(x, 2, 0.5), "two aromatic rings"))),
        Task("amlodipine_mpo", (
            similar_to(AMLODIPINE, "ECFP4"),
            descriptor("rings", lambda x: g(x, 3, 0.5), "three rings"))),
        Task("sitagliptin_mpo", (
            similar_to(SITAGLIPTIN, "ECFP4", lambda x: g(x, 0, 0.1), "ECFP4 Tanimoto to sitagliptin near 0"),
            descriptor("logp", lambda x: g(x, sita_logp, 0.2), "sitagliptin's logP"),
            descriptor("tpsa", lambda x: g(x, sita_tpsa, 5), "sitagliptin's TPSA"),
            formula_fit("C16H15F6N5O"))),
        Task("zaleplon_mpo", (similar_to(ZALEPLON, "ECFP4"), formula_fit("C19H17N3O2"))),
        Task("valsartan_smarts", (
            has_smarts("CN(C=O)Cc1ccc(c2ccccc2)cc1"),
            descriptor("logp", lambda x: g(x, vals_logp, 0.2), "sitagliptin's logP"),
            descriptor("tpsa", lambda x: g(x, vals_tpsa, 5), "sitagliptin's TPSA"),
            descriptor("bertz", lambda x: g(x, vals_bertz, 30), "sitagliptin's Bertz complexity"))),
        # hops: keep the pharmacophore, change the decoration or the scaffold (arithmetic means)
        Task("deco_hop", (
            at_least(HOP_START, "PHCO", 0.85),
            has_smarts("CS([#6])(=O)=O", present=False),
            has_smarts("[#7]-c1ccc2ncsc2c1", present=False),
            has_smarts(HOP_SCAFFOLD)), mean="arithmetic"),
        Task("scaffold_hop", (
            at_least(HOP_START, "PHCO", 0.75),
            has_smarts(HOP_DECORATION),
            has_smarts(HOP_SCAFFOLD, present=False)), mean="arithmetic"),
        Task("qed", (descriptor("qed", _identity, "QED"),)),
    ]
    return {t.name: t for t in sorted(tasks, key=lambda t: t.name)}


@functools.lru_cache(maxsize=1)
def _tasks() -> dict[str, Task]:
    require_rdkit()
    return _build()


#: The task names, in PMO's alphabetical order.
TASKS = ("albuterol_similarity", "amlodipine_mpo", "celecoxib_rediscovery", "deco_hop", "fexofenadine_mpo",
         "isomers_c7h8n2o2", "isomers_c9h10n2o2pf2cl", "median1", "median2", "mestranol_similarity",
         "osimertinib_mpo", "perindopril_mpo", "qed", "ranolazine_mpo", "scaffold_hop", "sitagliptin_mpo",
         "thiothixene_rediscovery", "troglitazone_rediscovery", "valsartan_smarts", "zaleplon_mpo")


def get_task(name: str) -> Task:
    """The task called ``name`` (one of :data:`TASKS`); a one-line ValueError for any other name."""
    if name not in TASKS:
        raise ValueError(f"unknown PMO task {name!r}; choose from {', '.join(TASKS)}")
    return _tasks()[name]
