r"""Quality metrics of a set of generated SMILES, defined as MOSES and GuacaMol define them.

Let :math:`S` be the samples (strings from a generative model, in order) and
:math:`V` the valid ones, written as canonical SMILES, *in sample order with
repeats kept*. The definitions follow the MOSES benchmark (Polykovskiy et al.,
"Molecular Sets (MOSES)", Front. Pharmacol. 2020, and its ``get_all_metrics``)
and GuacaMol (Brown et al., J. Chem. Inf. Model. 2019):

valid
    :math:`|V| / |S|`. A sample is valid when RDKit parses *and sanitizes* it
    (valences, aromaticity); the empty string is invalid. Molecules with
    unpaired (radical) electrons are valid, as in MOSES, and counted apart:
    ``n_radicals`` and ``radical_fraction`` (of the valid).
unique@k (k = 1,000 and 10,000)
    distinct canonical SMILES among the **first k valid** samples, divided by
    how many were looked at: :math:`|\mathrm{set}(V_{1..k})| / |V_{1..k}|`.
    With fewer than k valid samples MOSES warns and uses all of them; so do we,
    and ``unique@k_n`` says how many were used. ``uniqueness`` is the same over
    all valid samples.
novelty
    distinct valid samples whose canonical SMILES is not in the training set,
    divided by the distinct valid samples. (MOSES compares with its training
    file as written, which is already canonical; we canonicalize the training
    set, which is the same thing for MOSES's data and correct for any other.)
IntDiv_p (p = 1, 2)
    .. math:: \mathrm{IntDiv}_p = 1 - \frac{1}{|V|} \sum_{j \in V}
              \Bigl( \frac{1}{|V|} \sum_{i \in V} T_{ij}^{\,p} \Bigr)^{1/p}

    over the valid samples with repeats (self-pairs included), :math:`T` the
    Tanimoto similarity of Morgan radius-2, 1024-bit fingerprints. The p-th
    root is taken *per molecule*, then averaged, as MOSES's code does. (Before,
    we took one root of the grand mean, :math:`1 - (\mathrm{mean}_{ij} T_{ij}^p)^{1/p}`,
    the formula printed in the paper; by Jensen's inequality that is never
    larger, e.g. 0.8489 instead of MOSES's 0.8589 on the same samples. For
    p = 1 both agree.)
Filters
    fraction of valid samples (repeats kept) that pass MOSES's structural
    filters, see :mod:`minitransformer.chem.judge.filters`; None with a reason when
    the alert files are unavailable.
KL score
    GuacaMol's ``KLDivBenchmark`` (:mod:`minitransformer.chem.judge.distribution`),
    mapped onto a fixed list of samples as :func:`kl_sets` describes.
SNN, Frag, Scaf
    need a reference set; see :mod:`minitransformer.chem.judge.fragments`.
FCD (Fréchet ChemNet Distance)
    is computed apart, by :mod:`minitransformer.chem.frechet.fcd` (ChemNet's forward pass
    in NumPy), against a reference set and beside its floor; see
    :mod:`minitransformer.chem.judge.generator_report` and ``docs/fcd.md``.

All of them at once, into one dict with one rule for undefined values (None, and
a note saying why): :func:`minitransformer.chem.judge.evaluation.evaluate_samples`.
The functions here return 0.0 for a fraction of an empty set.
"""
from __future__ import annotations

import functools
from typing import Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, parse_valid, quiet_rdkit, require_rdkit
from minitransformer.chem.datasets.data import canonical
from minitransformer.chem.judge.distribution import DESCRIPTORS, descriptor_matrix, kl_divergences
from minitransformer.chem.judge.similarity import column_mean_tanimoto_powers, morgan_bits

__all__ = ["validity", "uniqueness", "unique_at_k", "novelty", "internal_diversity", "kl_sets", "kl_against",
           "UNIQUE_AT", "KL_SAMPLES", "KL_SEED"]

UNIQUE_AT = (1_000, 10_000)
KL_SAMPLES = 10_000  # GuacaMol's number_samples for the KL benchmark
KL_SEED = 42  # GuacaMol's draw of the KL reference (numpy.random.RandomState(42)): the default everywhere


def _canonical_set(smiles: Sequence[str]) -> set:
    """The distinct canonical SMILES of the valid ``smiles``, one molecule in memory at a time
    (MOSES's 1.58M training molecules would take over 20 GB as RDKit molecules at once).
    MOSES's own training set is taken as written, as MOSES's novelty takes it: its file holds
    canonical RDKit SMILES (:func:`~minitransformer.chem.datasets.moses.is_moses_train`)."""
    from minitransformer.chem.datasets.moses import is_moses_train
    from minitransformer.chem.progress import progress
    if is_moses_train(smiles):
        return set(smiles)
    out, chunk = set(), 20_000
    with progress(f"canonicalizing {len(smiles):,} training molecules", len(smiles)) as update:
        for start in range(0, len(smiles), chunk):
            part = smiles[start:start + chunk]
            out.update(c for c in map(canonical, part) if c is not None)
            update(len(part))
    return out


def _fraction(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _stereo_free(smiles: Sequence[str]) -> list[str]:
    """GuacaMol's ``canonicalize_list(..., include_stereocenters=False)``: canonical SMILES without
    stereo, invalid strings dropped, repeats dropped (first occurrence kept)."""
    Chem = require_rdkit()
    out = []
    with quiet_rdkit():
        for s in smiles:
            mol = mol_from_smiles(s)
            if mol is not None:
                out.append(Chem.MolToSmiles(mol, isomericSmiles=False))
    return list(dict.fromkeys(out))


class _TrainingSet:
    """The training SMILES canonicalized once, with caches for the KL score.

    Descriptors (about 1 ms per molecule) dominate the cost of the KL score; they
    are cached per stereo-free canonical SMILES, which also serves every generated
    molecule that is a copy of a training molecule.
    """

    def __init__(self, train: Sequence[str]):
        self.train = tuple(train)
        self.index = _canonical_set(train)
        self._descriptors: dict[str, np.ndarray] = {}
        self._references: dict = {}

    def reference(self, size: int, seed: int) -> list[str]:
        """GuacaMol's reference: ``size`` training strings drawn without replacement with
        ``numpy.random.RandomState(seed)``, then made stereo-free canonical and distinct."""
        key = (size, seed)
        if key not in self._references:
            pick = np.random.RandomState(seed).choice(len(self.train), size=size, replace=False)
            self._references[key] = _stereo_free([self.train[i] for i in pick])
        return self._references[key]

    def descriptors(self, smiles: Sequence[str], mols: Sequence) -> np.ndarray:
        todo = [i for i, s in enumerate(smiles) if s not in self._descriptors]
        if todo:
            for i, row in zip(todo, descriptor_matrix([mols[i] for i in todo],
                                                      label=f"KL: descriptors of {len(todo):,} molecules")):
                self._descriptors[smiles[i]] = row
        if not smiles:
            return np.zeros((0, len(DESCRIPTORS)))
        return np.stack([self._descriptors[s] for s in smiles])


@functools.lru_cache(maxsize=4)
def training_set(train: tuple[str, ...]) -> _TrainingSet:
    return _TrainingSet(train)


def validity(samples: Sequence[str]) -> float:
    """Fraction of ``samples`` that are valid molecules."""
    return _fraction(len(parse_valid(samples)[0]), len(samples))


def uniqueness(samples: Sequence[str]) -> float:
    """Distinct canonical SMILES among the valid samples / number of valid samples."""
    canon = parse_valid(samples)[1]
    return _fraction(len(set(canon)), len(canon))


def unique_at_k(valid_canonical: Sequence[str], k: int) -> tuple[float, int]:
    """MOSES's unique@k of the valid samples' canonical SMILES (in order): the fraction and how
    many were used (``min(k, len)``; fewer than k means MOSES would warn)."""
    head = list(valid_canonical[:k])
    return _fraction(len(set(head)), len(head)), len(head)


def novelty(samples: Sequence[str], train_smiles: Sequence[str]) -> float:
    """Distinct valid samples absent from the (canonicalized) training set / distinct valid samples
    (MOSES's training set as written, as MOSES counts: see :func:`_canonical_set`)."""
    distinct = set(parse_valid(samples)[1])
    known = training_set(tuple(train_smiles)).index
    return _fraction(sum(s not in known for s in distinct), len(distinct))


def intdiv_values(fps: np.ndarray, powers: tuple, label: str | None = None) -> np.ndarray:
    """MOSES IntDiv_p for each p: 1 - mean over j of (mean over i of T_ij^p)^(1/p) (``label``: the
    progress of the pairs, shown when it takes long)."""
    p = np.asarray(powers, dtype=np.float64)[:, None]
    return 1.0 - np.mean(column_mean_tanimoto_powers(fps, powers, label) ** (1.0 / p), axis=1)


def internal_diversity(samples: Sequence[str], p: int = 1) -> float:
    """MOSES's IntDiv_p of the valid samples, repeats kept (0.0 when there are none)."""
    mols = parse_valid(samples)[0]
    return float(intdiv_values(morgan_bits(mols), (p,))[0]) if mols else 0.0


def kl_sets(samples: Sequence[str], train_smiles: Sequence[str], seed: int = KL_SEED,
            n: int | None = None) -> tuple[list[str], list[str]]:
    """The generated and reference SMILES that GuacaMol's KL benchmark would compare.

    GuacaMol asks the model for ``number_samples`` = 10,000 distinct molecules
    (it samples up to twice that many), makes them stereo-free canonical, and
    compares them with 10,000 training molecules drawn at random (seed 42),
    also made stereo-free canonical and distinct. On a fixed list of samples
    we use ``n = min(len(samples), 10_000, len(train))`` as number_samples
    (``n`` overrides it); the generated set is the first ``n`` distinct
    valid samples (stereo-free canonical, in sample order) and the reference is
    ``n`` training strings drawn with ``RandomState(seed)``; the default is
    GuacaMol's own draw (42). A model with many repeats or invalid samples
    brings fewer than ``n`` molecules, which lowers its score, as in GuacaMol.
    """
    if n is None:
        n = min(len(samples), KL_SAMPLES, len(train_smiles))
    generated = _stereo_free(samples)[:n]
    return generated, training_set(tuple(train_smiles)).reference(n, seed)


def kl_against(samples: Sequence[str], reference: Sequence[str], seed: int = KL_SEED) -> float | None:
    """GuacaMol's KL score of ``samples`` against any ``reference`` set (for example molecules
    held out from training), with the sets of :func:`kl_sets`; None with fewer than two
    molecules on a side."""
    return kl_of(list(samples), training_set(tuple(reference)), seed)[0]


def kl_of(samples, training: _TrainingSet, seed: int) -> tuple[float | None, dict, int, int]:
    """(KL score or None, the ten KL values, generated size, reference size)."""
    n = min(len(samples), KL_SAMPLES, len(training.train))
    if n < 2:
        return None, {}, 0, 0
    generated = _stereo_free(samples)[:n]
    reference = training.reference(n, seed)
    if len(generated) < 2 or len(reference) < 2:
        return None, {}, len(generated), len(reference)
    with quiet_rdkit():
        gen_mols = [mol_from_smiles(s) for s in generated]
        ref_mols = [mol_from_smiles(s) for s in reference]
    kls = kl_divergences(ref_mols, gen_mols,
                         reference_descriptors=training.descriptors(reference, ref_mols),
                         generated_descriptors=training.descriptors(generated, gen_mols))
    score = float(np.mean([np.exp(-v) for v in kls.values()]))
    return score, kls, len(generated), len(reference)


def filters_fraction(mols, canon, filters) -> tuple[float | None, str]:
    """(fraction passing MOSES's filters, "") or (None, why not); each distinct molecule checked once."""
    from minitransformer.chem.judge.filters import default_filters, passes_filters
    if filters is None:
        return None, "not computed"
    if isinstance(filters, str):
        if filters != "moses":
            raise ValueError(f"filters must be 'moses', a list of SMARTS queries or None, got {filters!r}")
        filters, why = default_filters(download=False)
        if filters is None:
            return None, why
    if not mols:
        return None, "no valid sample"
    from minitransformer.chem.progress import tracked
    verdict = {}
    with quiet_rdkit():
        for m, s in tracked(f"MOSES filters on {len(mols):,} valid samples", zip(mols, canon), len(mols)):
            if s not in verdict:
                verdict[s] = passes_filters(m, filters)
    return sum(verdict[s] for s in canon) / len(canon), ""
