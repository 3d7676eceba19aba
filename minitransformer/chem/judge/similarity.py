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

The aggregate functions work through the rows in blocks, so memory stays at
``block x m`` floats however large the sets are.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np

from minitransformer.chem._rdkit import require_rdkit

__all__ = ["morgan_bits", "tanimoto_matrix", "mean_tanimoto_powers", "column_mean_tanimoto_powers",
           "nearest_neighbour_similarity", "max_tanimoto"]

_BLOCK = 2048


def morgan_bits(mols: Sequence, radius: int = 2, n_bits: int = 1024) -> np.ndarray:
    """Morgan fingerprints of RDKit molecules as a float32 0/1 matrix of shape (len(mols), n_bits)."""
    require_rdkit()
    from rdkit.Chem import rdFingerprintGenerator

    generator = rdFingerprintGenerator.GetMorganGenerator(radius=radius, fpSize=n_bits)
    out = np.zeros((len(mols), n_bits), dtype=np.float32)
    for row, mol in enumerate(mols):
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


def _row_blocks(n: int) -> Iterator[slice]:
    for start in range(0, n, _BLOCK):
        yield slice(start, min(start + _BLOCK, n))


def mean_tanimoto_powers(fps: np.ndarray, powers: Sequence[float] = (1.0,)) -> np.ndarray:
    """For each p in ``powers``, the mean of ``T(i, j) ** p`` over all ordered pairs of rows,
    self-pairs included. The similarity matrix is computed once for all powers."""
    n = len(fps)
    if n == 0:
        raise ValueError("need at least one fingerprint")
    totals = np.zeros(len(powers), dtype=np.float64)
    for rows in _row_blocks(n):
        sim = tanimoto_matrix(fps[rows], fps)
        for k, p in enumerate(powers):
            totals[k] += np.sum(sim if p == 1 else sim ** p, dtype=np.float64)
    return totals / (n * n)


def column_mean_tanimoto_powers(fps: np.ndarray, powers: Sequence[float] = (1.0,)) -> np.ndarray:
    r"""For each p in ``powers`` and each row j, :math:`\frac{1}{n} \sum_i T(i, j)^p` (self-pair
    included): an array of shape ``(len(powers), n)``. MOSES's internal diversity takes the
    p-th root of each of these before averaging over j."""
    n = len(fps)
    if n == 0:
        raise ValueError("need at least one fingerprint")
    out = np.zeros((len(powers), n), dtype=np.float64)
    for rows in _row_blocks(n):
        sim = tanimoto_matrix(fps[rows], fps)  # symmetric, so row sums are column sums
        for k, p in enumerate(powers):
            out[k, rows] = np.sum(sim if p == 1 else sim ** p, axis=1, dtype=np.float64)
    return out / n


def max_tanimoto(fps: np.ndarray, reference_fps: np.ndarray) -> np.ndarray:
    """For each row of ``fps`` (n, k), the largest Tanimoto similarity to a row of
    ``reference_fps`` (m, k); memory stays at ``block x m`` floats."""
    if len(fps) == 0 or len(reference_fps) == 0:
        raise ValueError("need at least one fingerprint on each side")
    out = np.empty(len(fps), dtype=np.float64)
    reference_fps = np.asarray(reference_fps, dtype=np.float32)
    ref_counts = reference_fps.sum(axis=1)[None, :]
    block = max(1, min(_BLOCK, (1 << 25) // max(1, len(reference_fps))))  # ~128 MiB per temporary
    for start in range(0, len(fps), block):
        a = np.asarray(fps[start:start + block], dtype=np.float32)
        inter = a @ reference_fps.T
        union = a.sum(axis=1)[:, None] + ref_counts - inter
        with np.errstate(invalid="ignore", divide="ignore"):
            sim = np.where(union == 0, 1.0, inter / union)
        out[start:start + block] = sim.max(axis=1)
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
