r"""RDKit's 2D descriptors of a molecule, put on one scale: extra inputs for a property model.

A descriptor is a number computed from the molecular graph: weight, logP, polar surface
area, counts of rings, donors and acceptors, charge statistics, fragment counts (RDKit's
``Descriptors.descList``, 217 of them in RDKit 2025). A toxicity model that sees them
beside what it reads from the SMILES gets, for free, facts a small network would
otherwise have to learn from a few thousand molecules; Chemprop users add them the
same way on Tox21.

**One scale for all.** Their ranges differ by orders of magnitude (a molecular weight of
300, a charge of 0.02, an index of 10^6) and many are heavy-tailed. Each descriptor
:math:`x_j` is therefore replaced by its place in the training molecules' distribution,
the empirical cumulative distribution function, centred:

.. math:: \tilde x_j = \hat F_j(x_j) - \tfrac12 \in [-\tfrac12, \tfrac12]

:math:`\hat F_j` is kept as :data:`LEVELS` quantiles of the training values and read
by linear interpolation (:class:`DescriptorScale`), so that a saved model carries
7,000 numbers, not its training set. A value RDKit cannot compute (NaN, infinite;
about one molecule in five has one) becomes 0, the training median. The scale is fitted
on the training split only: validation and test molecules are read with it, never fitted.

The descriptors depend on the molecule, not on how its SMILES is written, so one
molecule's random writings all share one row (:func:`compute_descriptors` canonicalizes
nothing; RDKit's values are properties of the graph).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit

__all__ = ["descriptor_names", "compute_descriptors", "DescriptorScale", "LEVELS", "SplitDescriptors",
           "split_descriptors"]

#: Quantiles kept per descriptor: the CDF at 0, 1/32, ..., 1.
LEVELS = 33
#: Molecules per chunk handed to a worker process.
_CHUNK = 500


def descriptor_names() -> list[str]:
    """The names of RDKit's 2D descriptors, in ``Descriptors.descList`` order."""
    require_rdkit()
    from rdkit.Chem import Descriptors
    return [name for name, _ in Descriptors.descList]


def _descriptor_rows(smiles: list) -> np.ndarray:
    """(n, F) float64 descriptors of one chunk; NaN where RDKit gives none or the SMILES does not parse.
    Module level: a worker process calls it by name."""
    require_rdkit()
    from rdkit.Chem import Descriptors
    functions = [fn for _, fn in Descriptors.descList]
    rows = np.full((len(smiles), len(functions)), np.nan)  # (n, F)
    with quiet_rdkit():
        for i, s in enumerate(smiles):
            mol = mol_from_smiles(s)
            if mol is None:
                continue
            for j, fn in enumerate(functions):
                try:
                    value = float(fn(mol))
                except (ValueError, ZeroDivisionError, OverflowError, RuntimeError):
                    continue  # RDKit raises for a few descriptors on odd molecules: no value
                if math.isfinite(value):
                    rows[i, j] = value
    return rows


#: The rows computed so far in this process, by SMILES: a command that trains several seeds or
#: models on one table computes each molecule's descriptors once. Filled up to ``_MEMO_SIZE``
#: molecules (about 35 MB), which holds Tox21 whole.
_MEMO: dict[str, np.ndarray] = {}
_MEMO_SIZE = 20_000


def compute_descriptors(smiles) -> np.ndarray:
    """RDKit's 2D descriptors of every molecule: (N, F) float64, NaN where there is none.
    Spread over worker processes for large sets (:func:`minitransformer.chem.workers.map_chunks`);
    a SMILES met before in this process (or twice in ``smiles``) is computed once."""
    from minitransformer.chem.workers import map_chunks
    smiles = list(smiles)
    new = list(dict.fromkeys(s for s in smiles if s not in _MEMO))
    chunks = [new[i:i + _CHUNK] for i in range(0, len(new), _CHUNK)]
    parts = map_chunks(_descriptor_rows, chunks, total=len(new) * 20)  # ~20 parses' work a molecule
    found = dict(zip(new, np.concatenate(parts))) if parts else {}  # SMILES -> (F,)
    if len(_MEMO) + len(found) <= _MEMO_SIZE:
        _MEMO.update(found)
    if not smiles:
        return np.empty((0, len(descriptor_names())))  # (0, F)
    return np.stack([found[s] if s in found else _MEMO[s] for s in smiles])  # (N, F)


@dataclass(frozen=True)
class DescriptorScale:
    r"""The centred empirical CDF of each descriptor over the training molecules.

    ``quantiles`` (F, LEVELS): column ``j``'s values at the CDF levels
    :math:`0, 1/32, \dots, 1`; a descriptor with no finite training value, or one value
    only, has a row of NaN and always reads 0."""

    names: tuple
    quantiles: np.ndarray  # (F, LEVELS)

    @classmethod
    def fit(cls, values: np.ndarray, names) -> "DescriptorScale":
        """Fit on the training molecules' raw descriptors ``values`` (N, F)."""
        values = np.asarray(values, dtype=np.float64)  # (N, F)
        if values.ndim != 2 or values.shape[1] != len(names):
            raise ValueError(f"DescriptorScale.fit: values of shape {values.shape} for {len(names)} descriptor "
                             "names; give one column per name")
        levels = np.linspace(0.0, 1.0, LEVELS)  # (LEVELS,)
        q = np.full((values.shape[1], LEVELS), np.nan)  # (F, LEVELS)
        for j in range(values.shape[1]):
            column = values[:, j][np.isfinite(values[:, j])]
            if column.size and column.min() < column.max():
                q[j] = np.quantile(column, levels)
        return cls(tuple(names), q)

    def transform(self, values: np.ndarray) -> np.ndarray:
        r""":math:`\hat F_j(x) - 1/2` of every entry of ``values`` (N, F): float32 (N, F) in
        [-1/2, 1/2], 0 where the value or the descriptor's scale is missing."""
        values = np.asarray(values, dtype=np.float64)  # (N, F)
        if values.ndim != 2 or values.shape[1] != len(self.names):
            raise ValueError(f"DescriptorScale: values of shape {values.shape}; the scale has "
                             f"{len(self.names)} descriptors")
        out = np.zeros(values.shape, dtype=np.float32)  # (N, F)
        for j, q in enumerate(self.quantiles):
            if not np.isfinite(q).all():
                continue
            x = values[:, j]
            ok = np.isfinite(x)
            knots, first = np.unique(q, return_index=True)  # tied quantiles: the middle of their levels
            last = len(q) - 1 - np.unique(q[::-1], return_index=True)[1]
            level = (first + last) / (2.0 * (len(q) - 1))  # (len(knots),)
            out[ok, j] = np.interp(x[ok], knots, level, left=0.0, right=1.0) - 0.5  # outside: the ends
        return out

    def to_json(self) -> dict:
        """Plain lists, for a checkpoint's metadata (JSON keeps a float exactly: a saved model reads
        the descriptors as its run did)."""
        return {"names": list(self.names),
                "quantiles": [[float(v) if np.isfinite(v) else None for v in row] for row in self.quantiles]}

    @classmethod
    def from_json(cls, d: dict) -> "DescriptorScale":
        q = np.array([[np.nan if v is None else v for v in row] for row in d["quantiles"]], dtype=np.float64)
        if q.ndim != 2 or q.shape != (len(d["names"]), LEVELS):
            raise ValueError(f"a descriptor scale of shape {q.shape} for {len(d['names'])} names; expected "
                             f"({len(d['names'])}, {LEVELS}): the checkpoint is damaged")
        return cls(tuple(d["names"]), q)


class SplitDescriptors(NamedTuple):
    """The descriptors of a data set's three splits, on the scale fitted to the training split."""

    scale: DescriptorScale
    train: np.ndarray  # (N_train, F) float32
    val: np.ndarray  # (N_val, F)
    test: np.ndarray  # (N_test, F)


def split_descriptors(train, val, test, log=print) -> SplitDescriptors:
    """Compute the descriptors of every molecule of the three splits (each with a ``smiles`` list),
    fit their scale on ``train`` alone and put all three on it."""
    t0 = time.perf_counter()
    raw = [compute_descriptors(part.smiles) for part in (train, val, test)]  # 3 x (N, F) float64
    scale = DescriptorScale.fit(raw[0], descriptor_names())
    log(f"descriptors: {len(scale.names)} of RDKit's per molecule, scaled on the training split "
        f"({time.perf_counter() - t0:.0f} s)")
    return SplitDescriptors(scale, *(scale.transform(x) for x in raw))
