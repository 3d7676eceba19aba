"""Morgan fingerprints as NumPy bit matrices, and Tanimoto similarity by matrix product.

A Morgan (ECFP-like) fingerprint hashes every circular neighbourhood of every
atom, up to ``radius`` bonds, into one of ``n_bits`` positions of a bit
vector. Radius 2 corresponds to ECFP4. The Tanimoto similarity of two bit
vectors ``a`` and ``b`` is

    T(a, b) = |a AND b| / |a OR b| = a.b / (|a| + |b| - a.b),

so for whole sets of molecules, held as 0/1 matrices ``A`` (n x bits) and
``B`` (m x bits), all n*m intersections come from one matrix product
``A @ B.T``. With float32 0/1 entries the counts are exact (they are small
integers) and the product runs in optimized BLAS instead of a Python double
loop. Two empty fingerprints (0/0) are given similarity 1, as MOSES does.

The aggregate functions work through the rows in blocks of at most 2**25 similarities
(128 MiB a temporary), so memory stays bounded however large the sets are.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from minitransformer.chem._rdkit import require_rdkit

__all__ = ["morgan_bits", "tanimoto_matrix", "mean_tanimoto_powers", "column_mean_tanimoto_powers",
           "nearest_neighbour_similarity", "max_tanimoto"]

_BLOCK = 2048


def morgan_bits(mols: Sequence, radius: int = 2, n_bits: int = 1024, label: str | None = None) -> np.ndarray:
    """Morgan fingerprints of RDKit molecules as a float32 0/1 matrix of shape (len(mols), n_bits)
    (``label``: the loop's progress, :func:`~minitransformer.chem.progress.tracked`)."""
    require_rdkit()
    from rdkit.Chem import rdFingerprintGenerator

    from minitransformer.chem.progress import tracked
    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    out = np.zeros((len(mols), n_bits), dtype=np.float32)  # (N, n_bits)
    for row, mol in tracked(label, enumerate(mols), total=len(mols)):
        out[row] = generator.GetFingerprintAsNumPy(mol)
    return out


def tanimoto_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """All Tanimoto similarities between the rows of bit matrices ``a`` (n, k) and ``b`` (m, k)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    inter = a @ b.T
    union = a.sum(axis=1)[:, None] + b.sum(axis=1)[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        sim = inter / union
    sim[union == 0] = 1.0
    return sim


#: The most similarities one block holds (float32: 128 MiB a temporary, whatever the set's size).
_BLOCK_VALUES = 1 << 25


def _row_blocks(n: int, m: int | None = None, label: str | None = None) -> Iterator[slice]:
    """Slices of ``n`` rows, each compared with ``m`` others (default ``n``) within
    :data:`_BLOCK_VALUES` similarities; ``label``: the loop's progress, in rows
    (:func:`~minitransformer.chem.progress.tracked`)."""
    from minitransformer.chem.progress import tracked
    block = max(1, min(_BLOCK, _BLOCK_VALUES // max(1, n if m is None else m)))
    starts = range(0, n, block)
    for start in tracked(label, starts, total=len(starts), unit="blocks", every=1):
        yield slice(start, min(start + block, n))


def mean_tanimoto_powers(fps: np.ndarray, powers: Sequence[float] = (1.0,), label: str | None = None) -> np.ndarray:
    """For each p in ``powers``, the mean of ``T(i, j) ** p`` over all ordered pairs of rows,
    self-pairs included. The similarity matrix is computed once for all powers."""
    n = len(fps)
    if n == 0:
        raise ValueError("need at least one fingerprint")
    totals = np.zeros(len(powers), dtype=np.float64)
    for rows in _row_blocks(n, label=label):
        sim = tanimoto_matrix(fps[rows], fps)
        for k, p in enumerate(powers):
            totals[k] += np.sum(sim if p == 1 else sim ** p, dtype=np.float64)
    return totals / (n * n)


def column_mean_tanimoto_powers(fps: np.ndarray, powers: Sequence[float] = (1.0,),
                                label: str | None = None) -> np.ndarray:
    r"""For each p in ``powers`` and each row j, :math:`\frac{1}{n} \sum_i T(i, j)^p` (self-pair
    included): an array of shape ``(len(powers), n)``. MOSES's internal diversity takes the
    p-th root of each of these before averaging over j."""
    n = len(fps)
    if n == 0:
        raise ValueError("need at least one fingerprint")
    out = np.zeros((len(powers), n), dtype=np.float64)
    for rows in _row_blocks(n, label=label):
        sim = tanimoto_matrix(fps[rows], fps)  # symmetric, so row sums are column sums
        for k, p in enumerate(powers):
            out[k, rows] = np.sum(sim if p == 1 else sim ** p, axis=1, dtype=np.float64)
    return out / n


def max_tanimoto(fps: np.ndarray, reference_fps: np.ndarray, label: str | None = None) -> np.ndarray:
    """For each row of ``fps`` (n, k), the largest Tanimoto similarity to a row of
    ``reference_fps`` (m, k); memory stays at ``block x m`` floats."""
    if len(fps) == 0 or len(reference_fps) == 0:
        raise ValueError("need at least one fingerprint on each side")
    out = np.empty(len(fps), dtype=np.float64)
    reference_fps = np.asarray(reference_fps, dtype=np.float32)
    ref_counts = reference_fps.sum(axis=1)[None, :]
    for rows in _row_blocks(len(fps), len(reference_fps), label):
        a = np.asarray(fps[rows], dtype=np.float32)  # (block, k)
        inter = a @ reference_fps.T  # (block, m)
        union = a.sum(axis=1)[:, None] + ref_counts - inter  # (block, m)
        with np.errstate(invalid="ignore", divide="ignore"):
            sim = np.where(union == 0, 1.0, inter / union)  # (block, m)
        out[rows] = sim.max(axis=1)
    return out


def nearest_neighbour_similarity(fps: np.ndarray) -> np.ndarray:
    """For each row, the largest Tanimoto similarity to any *other* row (needs >= 2 rows)."""
    n = len(fps)
    if n < 2:
        raise ValueError("nearest-neighbour similarity needs at least two fingerprints")
    out = np.empty(n, dtype=np.float64)
    for rows in _row_blocks(n):
        sim = tanimoto_matrix(fps[rows], fps)
        idx = np.arange(rows.start, rows.stop)
        sim[idx - rows.start, idx] = -1.0  # exclude each molecule's pair with itself
        out[rows] = sim.max(axis=1)
    return out
