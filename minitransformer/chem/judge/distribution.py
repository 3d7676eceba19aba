r"""GuacaMol's KL-divergence score: do generated molecules look like the training set?

For each of ten properties :math:`k` we compare the distribution over a
reference set (molecules drawn from the training data) with the distribution
over the generated set by the Kullback-Leibler divergence

.. math:: \mathrm{KL}_k(P_\mathrm{ref} \,\|\, P_\mathrm{gen}) = \sum_x P_\mathrm{ref}(x) \log \frac{P_\mathrm{ref}(x)}{P_\mathrm{gen}(x)},
          \qquad \mathrm{score} = \frac{1}{10} \sum_k e^{-\mathrm{KL}_k} .

Each term is 1 for identical distributions and falls toward 0 as they part.
KL(ref || gen) is large where the reference has mass but the generated set has
none: it punishes a generator that misses parts of chemical space.

The ten properties are those of GuacaMol's ``KLDivBenchmark`` (Brown et al.,
J. Chem. Inf. Model. 2019):

* continuous: ``BertzCT`` (graph complexity), ``MolLogP`` (Crippen logP),
  ``MolWt``, ``TPSA`` (polar surface area), and the internal nearest-neighbour
  similarity: for each molecule, the largest Tanimoto similarity to another
  molecule of the same set, on Morgan radius-2 bit vectors of 4096 bits;
* discrete (integer counts): ``NumHAcceptors``, ``NumHDonors``,
  ``NumRotatableBonds``, ``NumAliphaticRings``, ``NumAromaticRings``.

Estimating the distributions, as GuacaMol does
----------------------------------------------
Continuous: a Gaussian kernel density estimate of each set with Scott's
bandwidth :math:`h = \mathrm{std}(x) \, n^{-1/5}` (``std`` with ``ddof=1``;
this is ``scipy.stats.gaussian_kde`` in one dimension), evaluated on 1000
evenly spaced points from the smallest to the largest value of *both* sets;
``1e-10`` is added to each density and both are normalized to sum to one.

Discrete: a histogram of the **reference** values in 10 equal bins over the
reference's range (``numpy.histogram(ref, bins=10, density=True)``), and a
histogram of the generated values in the *same* bins (generated values outside
the reference range are not counted); ``1e-10`` is added to each density and
both are normalized.

Two corner cases where GuacaMol's code fails rather than answers, and what we do:
a set whose values are all equal has no KDE bandwidth (scipy raises); we use one
grid step as its bandwidth. A generated set with no value inside the reference
bins gives ``0/0`` densities (NaN); we use all-zero counts, so only the
``1e-10`` remains and the KL is large.

Which molecules are compared is decided by the caller
(:func:`minitransformer.chem.judge.metrics.kl_sets`).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from minitransformer.chem._rdkit import require_rdkit
from minitransformer.chem.judge.similarity import morgan_bits, nearest_neighbour_similarity

__all__ = ["CONTINUOUS", "DISCRETE", "DESCRIPTORS", "SIMILARITY", "gaussian_kde", "kl_divergence",
           "continuous_kl", "discrete_kl", "descriptor_matrix", "kl_divergences", "kl_score"]

CONTINUOUS = ("BertzCT", "MolLogP", "MolWt", "TPSA")
DISCRETE = ("NumHAcceptors", "NumHDonors", "NumRotatableBonds", "NumAliphaticRings",
            "NumAromaticRings")
DESCRIPTORS = CONTINUOUS + DISCRETE
SIMILARITY = "InternalSimilarity"
_GRID_POINTS = 1000
_EPS = 1e-10


def gaussian_kde(data: np.ndarray, grid: np.ndarray, bandwidth: float | None = None) -> np.ndarray:
    """Gaussian kernel density estimate of 1-D ``data`` evaluated at ``grid``.

    ``bandwidth`` defaults to Scott's rule, ``std(data, ddof=1) * n ** (-1/5)``.
    """
    data = np.asarray(data, dtype=np.float64)
    grid = np.asarray(grid, dtype=np.float64)
    if bandwidth is None:
        bandwidth = float(np.std(data, ddof=1)) * len(data) ** (-0.2)
    if not bandwidth > 0:
        raise ValueError(f"KDE bandwidth must be positive, got {bandwidth}")
    density = np.zeros_like(grid)
    for start in range(0, len(data), 4096):  # bounded memory: grid x 4096 at a time
        z = (grid[:, None] - data[None, start:start + 4096]) / bandwidth
        density += np.exp(-0.5 * z * z).sum(axis=1)
    return density / (len(data) * bandwidth * np.sqrt(2.0 * np.pi))


def kl_divergence(p: np.ndarray, q: np.ndarray) -> float:
    """KL(p || q) of two non-negative weight vectors, after adding 1e-10 and normalizing
    (``scipy.stats.entropy(p + 1e-10, q + 1e-10)``)."""
    p = np.asarray(p, dtype=np.float64) + _EPS
    q = np.asarray(q, dtype=np.float64) + _EPS
    p /= p.sum()
    q /= q.sum()
    return float(np.sum(p * np.log(p / q)))


def continuous_kl(reference: np.ndarray, generated: np.ndarray) -> float:
    """GuacaMol's ``continuous_kldiv``: KL between Gaussian KDEs of two samples (each >= 2 values)."""
    reference = np.asarray(reference, dtype=np.float64)
    generated = np.asarray(generated, dtype=np.float64)
    lo = min(reference.min(), generated.min())
    hi = max(reference.max(), generated.max())
    if hi == lo:  # both sets are the same single value
        return 0.0
    grid = np.linspace(lo, hi, _GRID_POINTS)
    step = grid[1] - grid[0]
    densities = []
    for x in (reference, generated):
        h = float(np.std(x, ddof=1)) * len(x) ** (-0.2)
        densities.append(gaussian_kde(x, grid, bandwidth=h if h > 0 else step))
    return kl_divergence(*densities)


def discrete_kl(reference: np.ndarray, generated: np.ndarray) -> float:
    """GuacaMol's ``discrete_kldiv``: KL between 10-bin histograms over the reference's range."""
    reference = np.asarray(reference, dtype=np.float64)
    generated = np.asarray(generated, dtype=np.float64)
    p, bins = np.histogram(reference, bins=10, density=True)
    counts, _ = np.histogram(generated, bins=bins)
    width = np.diff(bins)
    q = counts / (counts.sum() * width) if counts.sum() else np.zeros_like(p)  # density=True, no NaN
    return kl_divergence(p, q)


def descriptor_matrix(mols: Sequence, label: str | None = None) -> np.ndarray:
    """The nine RDKit descriptors of each molecule, shape (len(mols), 9), columns in
    the order ``CONTINUOUS + DISCRETE``. This is the slow part of the score
    (about 0.7 ms per molecule, mostly ``BertzCT`` and ``MolLogP``), so callers
    that compare against the same reference repeatedly may compute it once.
    A non-finite value is replaced by 0, as GuacaMol does."""
    require_rdkit()
    from rdkit.Chem import Descriptors

    from minitransformer.chem.progress import tracked
    functions = [getattr(Descriptors, name) for name in DESCRIPTORS]
    out = np.empty((len(mols), len(functions)), dtype=np.float64)  # (N, 9)
    for row, mol in tracked(label, enumerate(mols), total=len(mols)):
        out[row] = [f(mol) for f in functions]
    out[~np.isfinite(out)] = 0.0
    return out


def kl_divergences(reference_mols: Sequence, generated_mols: Sequence,
                   reference_descriptors: np.ndarray | None = None,
                   generated_descriptors: np.ndarray | None = None) -> dict[str, float]:
    """KL(P_ref || P_gen) for each of the ten properties (each set needs >= 2 molecules).

    Precomputed :func:`descriptor_matrix` results may be passed to skip that step.
    """
    if len(reference_mols) < 2 or len(generated_mols) < 2:
        raise ValueError("the KL comparison needs at least two molecules in each set")
    if reference_descriptors is None:
        reference_descriptors = descriptor_matrix(reference_mols)
    if generated_descriptors is None:
        generated_descriptors = descriptor_matrix(generated_mols)
    out = {}
    for col, name in enumerate(DESCRIPTORS):
        kl = continuous_kl if name in CONTINUOUS else discrete_kl
        out[name] = kl(reference_descriptors[:, col], generated_descriptors[:, col])
    similarity = [nearest_neighbour_similarity(morgan_bits(m, radius=2, n_bits=4096))
                  for m in (reference_mols, generated_mols)]
    out[SIMILARITY] = continuous_kl(*similarity)
    return out


def kl_score(reference_mols: Sequence, generated_mols: Sequence, **descriptors) -> float:
    """GuacaMol's KL-divergence score, ``mean over the ten properties of exp(-KL)``, in (0, 1].

    Keyword arguments are passed to :func:`kl_divergences`.
    """
    kls = kl_divergences(reference_mols, generated_mols, **descriptors)
    return float(np.mean([np.exp(-v) for v in kls.values()]))
