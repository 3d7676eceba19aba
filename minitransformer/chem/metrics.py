"""Quality metrics for a set of generated SMILES, in the style of MOSES and GuacaMol.

Given ``samples`` (strings from a generative model) and the training SMILES:

validity
    fraction of all samples that RDKit parses and sanitizes into a molecule
    with at least one atom.
uniqueness
    distinct canonical SMILES among the valid samples / number of valid samples.
novelty
    distinct valid samples whose canonical SMILES is not in the canonicalized
    training set / distinct valid samples. A model that copies its training
    data scores 0.
IntDiv_p (p = 1, 2)
    internal diversity, ``1 - (mean over all ordered pairs (i, j) of T_ij ** p) ** (1/p)``
    with ``T`` the Tanimoto similarity of Morgan radius-2, 1024-bit fingerprints
    over the valid samples (duplicates included), self-pairs included. This is
    the formula of the MOSES paper (Polykovskiy et al., 2020). Because
    ``T_ii = 1`` is part of the mean, a set of ``n`` unrelated molecules
    reaches at most ``1 - 1/n ** (1/p)``; a set of copies of one molecule
    scores exactly 0. (The MOSES code takes the p-th root per molecule before
    averaging; for p = 1 both agree.)
KL score
    GuacaMol's KL-divergence score (see :mod:`minitransformer.chem.distribution`)
    between the distinct valid samples and a reference of equally many
    molecules drawn, with a seeded generator, from the distinct valid training
    molecules.

Metrics over an empty set (no valid sample; fewer than two molecules for the
KL score) are reported as 0.0 so every value stays a float in [0, 1].
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit
from minitransformer.chem.distribution import DESCRIPTORS, descriptor_matrix, kl_score
from minitransformer.chem.similarity import mean_tanimoto_powers, morgan_bits

__all__ = ["validity", "uniqueness", "novelty", "internal_diversity", "evaluate_samples"]


def _parse(smiles: Sequence[str]) -> tuple[list, list[str]]:
    """Valid molecules among ``smiles`` and their canonical SMILES (same order, duplicates kept)."""
    Chem = require_rdkit()
    mols, canon = [], []
    with quiet_rdkit():
        for s in smiles:
            mol = mol_from_smiles(s)
            if mol is not None:
                mols.append(mol)
                canon.append(Chem.MolToSmiles(mol))
    return mols, canon


class _TrainingSet:
    """The training SMILES canonicalized once, with a lazily filled cache of descriptors.

    Descriptors (about 1 ms per molecule) dominate the cost of the KL score.
    They are cached per distinct training molecule, which serves the
    reference set on every later call and also every generated molecule that
    is a copy of a training molecule.
    """

    def __init__(self, train: Sequence[str]):
        _, canon = _parse(train)
        self.distinct = tuple(dict.fromkeys(canon))  # distinct molecules, first-seen order
        self.index = {s: i for i, s in enumerate(self.distinct)}
        self._descriptors = np.full((len(self.distinct), len(DESCRIPTORS)), np.nan)

    def reference(self, size: int, seed: int) -> tuple[list[str], list]:
        """``size`` distinct training molecules drawn with ``default_rng(seed)``: SMILES and molecules."""
        pick = np.sort(np.random.default_rng(seed).choice(len(self.distinct), size=size,
                                                          replace=False))
        smiles = [self.distinct[i] for i in pick]
        with quiet_rdkit():
            return smiles, [mol_from_smiles(s) for s in smiles]

    def descriptors(self, smiles: Sequence[str], mols: Sequence) -> np.ndarray:
        """Descriptor rows of canonical ``smiles`` (molecules ``mols``), cached for training molecules."""
        out = np.full((len(smiles), len(DESCRIPTORS)), np.nan)
        rows = np.array([self.index.get(s, -1) for s in smiles], dtype=np.int64)
        known = rows >= 0
        out[known] = self._descriptors[rows[known]]
        todo = np.flatnonzero(np.isnan(out[:, 0]))
        if len(todo):
            out[todo] = descriptor_matrix([mols[i] for i in todo])
            cache = todo[known[todo]]
            self._descriptors[rows[cache]] = out[cache]
        return out


@functools.lru_cache(maxsize=4)
def _training_set(train: tuple[str, ...]) -> _TrainingSet:
    return _TrainingSet(train)


def _fraction(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def validity(samples: Sequence[str]) -> float:
    """Fraction of ``samples`` that are valid molecules."""
    return _fraction(len(_parse(samples)[0]), len(samples))


def uniqueness(samples: Sequence[str]) -> float:
    """Distinct canonical SMILES among the valid samples / number of valid samples."""
    canon = _parse(samples)[1]
    return _fraction(len(set(canon)), len(canon))


def novelty(samples: Sequence[str], train_smiles: Sequence[str]) -> float:
    """Distinct valid samples absent from the (canonicalized) training set / distinct valid samples."""
    distinct = set(_parse(samples)[1])
    known = _training_set(tuple(train_smiles)).index
    return _fraction(sum(s not in known for s in distinct), len(distinct))


def internal_diversity(samples: Sequence[str], p: int = 1) -> float:
    """IntDiv_p of the valid samples (0.0 when there are none)."""
    mols = _parse(samples)[0]
    return float(_intdiv(morgan_bits(mols), (p,))[0]) if mols else 0.0


def _intdiv(fps: np.ndarray, powers: tuple) -> np.ndarray:
    p = np.asarray(powers, dtype=np.float64)
    return 1.0 - mean_tanimoto_powers(fps, powers) ** (1.0 / p)


def evaluate_samples(samples: Sequence[str], train_smiles: Sequence[str], seed: int = 0) -> dict:
    """All metrics of ``samples`` against ``train_smiles`` in one pass.

    Returns a dict with the fractions ``validity``, ``uniqueness``,
    ``novelty``, ``intdiv1``, ``intdiv2``, ``kl_score`` (floats in [0, 1]) and
    the counts ``n_samples``, ``n_valid``, ``n_unique``, ``n_novel``,
    ``n_reference`` (molecules in the KL reference set). ``seed`` fixes the
    reference subset. The canonicalized training set and the descriptors of
    training molecules are cached (for the last four training lists), so
    repeated calls with the same training list skip that work.
    """
    samples = list(samples)
    mols, canon = _parse(samples)
    training = _training_set(tuple(train_smiles))
    known = training.index

    distinct = list(dict.fromkeys(canon))
    novel = [s for s in distinct if s not in known]
    result = {
        "validity": _fraction(len(mols), len(samples)),
        "uniqueness": _fraction(len(distinct), len(mols)),
        "novelty": _fraction(len(novel), len(distinct)),
        "intdiv1": 0.0,
        "intdiv2": 0.0,
        "kl_score": 0.0,
        "n_samples": len(samples),
        "n_valid": len(mols),
        "n_unique": len(distinct),
        "n_novel": len(novel),
        "n_reference": 0,
    }
    if mols:
        result["intdiv1"], result["intdiv2"] = map(float, _intdiv(morgan_bits(mols), (1, 2)))
    n_ref = min(len(distinct), len(training.distinct))
    if n_ref >= 2:
        ref_smiles, ref_mols = training.reference(n_ref, seed)
        first_mol = {}
        for mol, s in zip(mols, canon):
            first_mol.setdefault(s, mol)
        gen_mols = [first_mol[s] for s in distinct]
        result["kl_score"] = kl_score(
            ref_mols, gen_mols,
            reference_descriptors=training.descriptors(ref_smiles, ref_mols),
            generated_descriptors=training.descriptors(distinct, gen_mols))
        result["n_reference"] = n_ref
    return result
