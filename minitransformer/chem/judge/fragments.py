r"""MOSES's three comparisons of generated molecules with a reference set: SNN, Frag and Scaf.

Let :math:`G` be the valid generated molecules (duplicates kept, as MOSES keeps
them) and :math:`R` the valid reference molecules (MOSES uses its ``test`` set,
and again its ``test_scaffolds`` set).

SNN, similarity to a nearest neighbour
    .. math:: \mathrm{SNN} = \frac{1}{|G|} \sum_{g \in G} \max_{r \in R} T(g, r)

    with :math:`T` the Tanimoto similarity of Morgan radius-2, 1024-bit
    fingerprints (two empty fingerprints count as identical, :math:`T = 1`).
Frag, fragment similarity
    .. math:: \mathrm{Frag} = \cos(c_G, c_R) = \frac{\sum_f c_G[f]\, c_R[f]}{\lVert c_G \rVert \, \lVert c_R \rVert}

    where :math:`c_S[f]` is how many times the BRICS fragment :math:`f` occurs
    in the molecules of :math:`S`, *counting repeats inside a molecule*. A
    molecule is cut with RDKit's ``FragmentOnBRICSBonds``, which breaks every
    bond a BRICS retrosynthesis rule matches at once and caps each cut end with
    a dummy atom labelled by its rule (``[1*]``, ``[16*]``, ...); the canonical
    SMILES of the cut molecule, split at ``.``, lists the fragments. (This is
    what MOSES's ``fragmenter`` does; it does not use ``BRICSDecompose``.)
Scaf, scaffold similarity
    The same cosine over counts of Bemis-Murcko scaffolds (ring systems and the
    chains linking them, side chains removed; RDKit's ``GetScaffoldForMol``,
    written as isomeric canonical SMILES). As in MOSES, a scaffold with fewer
    than **two** rings is not counted: acyclic and single-ring molecules do not
    take part.

A cosine needs a non-empty count on both sides; otherwise it is None.

Speed. Each distinct molecule is fingerprinted and cut once (a sample set is
full of repeats). The reference side is the slow part (MOSES's test set has
176k molecules), so :func:`reference_features` keeps the last references in
memory and, for references of at least :data:`DISK_CACHE_MIN` molecules, also on
disk under :func:`~minitransformer.chem.datasets.download.cache_dir`, keyed by the
SHA-256 of the reference strings.
"""
from __future__ import annotations

import functools
import hashlib
import io
import json
import math
from collections import Counter
from typing import Sequence

from minitransformer.atomic import parse_json
import numpy as np

from minitransformer.chem._rdkit import parse_valid, quiet_rdkit, require_rdkit
from minitransformer.chem.judge.similarity import max_tanimoto, morgan_bits

__all__ = ["fragments_of", "scaffold_of", "fragment_counts", "scaffold_counts", "cosine_of_counts",
           "snn", "ReferenceFeatures", "reference_features", "DISK_CACHE_MIN"]

DISK_CACHE_MIN = 50_000
CHUNK = 10_000  # molecules a step of ReferenceFeatures.compute
_FORMAT = "moses-reference-v3"  # v2: the molecular weights too; v3: the key, count and checksum


def fragments_of(mol) -> list[str]:
    """The BRICS fragments of one molecule, repeats kept (MOSES's ``fragmenter``)."""
    Chem = require_rdkit()
    return Chem.MolToSmiles(Chem.FragmentOnBRICSBonds(mol)).split(".")


def scaffold_of(mol, min_rings: int = 2) -> str | None:
    """The Bemis-Murcko scaffold's SMILES, or None when it has fewer than ``min_rings`` rings."""
    Chem = require_rdkit()
    from rdkit.Chem.Scaffolds import MurckoScaffold
    try:
        scaffold = MurckoScaffold.GetScaffoldForMol(mol)
    except (ValueError, RuntimeError):
        return None
    smiles = Chem.MolToSmiles(scaffold)
    if not smiles or scaffold.GetRingInfo().NumRings() < min_rings:
        return None
    return smiles


def _by_molecule(smiles: Sequence[str], mols: Sequence, count_one, label: str | None = None) -> Counter:
    """Sum of ``count_one(mol)`` (a Counter) over ``mols``, computed once per distinct SMILES
    (``label``: the loop's progress, :func:`~minitransformer.chem.progress.tracked`)."""
    from minitransformer.chem.progress import tracked
    copies = Counter(smiles)
    first = {}
    for s, m in zip(smiles, mols):
        first.setdefault(s, m)
    total = Counter()
    with quiet_rdkit():
        for s, n in tracked(label, copies.items(), len(copies)):
            for key, c in count_one(first[s]).items():
                total[key] += c * n
    return total


def fragment_counts(mols: Sequence, smiles: Sequence[str] | None = None, label: str | None = None) -> Counter:
    """:math:`c[f]` over ``mols``; pass their canonical ``smiles`` to cut each distinct one once."""
    smiles = list(smiles) if smiles is not None else list(range(len(mols)))
    return _by_molecule(smiles, mols, lambda m: Counter(fragments_of(m)), label)


def scaffold_counts(mols: Sequence, smiles: Sequence[str] | None = None, label: str | None = None) -> Counter:
    """Scaffold counts over ``mols`` (scaffolds of two rings or more only)."""
    smiles = list(smiles) if smiles is not None else list(range(len(mols)))

    def one(m):
        s = scaffold_of(m)
        return Counter() if s is None else Counter({s: 1})
    return _by_molecule(smiles, mols, one, label)


def cosine_of_counts(a: Counter, b: Counter) -> float | None:
    r""":math:`\sum_k a_k b_k / (\lVert a \rVert \lVert b \rVert)` over the union of keys;
    None when either counter is empty (the angle is undefined)."""
    if not a or not b:
        return None
    dot = sum(count * b[key] for key, count in a.items() if key in b)
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return float(dot / norm)


def snn(sample_fps: np.ndarray, reference_fps: np.ndarray, label: str | None = None) -> float:
    """Mean over the rows of ``sample_fps`` of the largest Tanimoto similarity to a row of
    ``reference_fps`` (both need at least one row; ``label``: the progress shown when it takes long)."""
    return float(max_tanimoto(sample_fps, reference_fps, label).mean())


def distinct_fingerprints(mols: Sequence, smiles: Sequence[str], label: str | None = None) -> np.ndarray:
    """Morgan r=2, 1024-bit rows of ``mols``, fingerprinting each distinct SMILES once."""
    index = {}
    for i, s in enumerate(smiles):
        index.setdefault(s, i)
    rows = morgan_bits([mols[i] for i in index.values()], label=label)
    where = {s: k for k, s in enumerate(index)}
    return rows[[where[s] for s in smiles]]


class ReferenceFeatures:
    """What the comparisons with a reference need of it: the fingerprints (n_valid, 1024) of its
    valid molecules (SNN), its fragment and scaffold counts (Frag, Scaf) and their molecular
    weights (n_valid,) (MOSES's ``weight``)."""

    def __init__(self, n_valid: int, fps: np.ndarray, fragments: Counter, scaffolds: Counter, weights: np.ndarray):
        self.n_valid, self.fps, self.fragments, self.scaffolds = n_valid, fps, fragments, scaffolds
        self.weights = weights

    @classmethod
    def compute(cls, reference: Sequence[str]) -> "ReferenceFeatures":
        """The features of ``reference``, :data:`CHUNK` molecules at a time (a large set shows its
        progress and the time left: :func:`~minitransformer.chem.progress.progress`)."""
        from rdkit.Chem import Descriptors

        from minitransformer.chem.progress import progress
        n_valid, fps, fragments, scaffolds, weights = 0, [], Counter(), Counter(), []
        with progress(f"reference features of {len(reference):,} molecules", len(reference)) as update:
            for start in range(0, len(reference), CHUNK):
                chunk = reference[start:start + CHUNK]
                mols, canon = parse_valid(chunk)
                n_valid += len(mols)
                fps.append(distinct_fingerprints(mols, canon) if mols else np.zeros((0, 1024), np.float32))
                fragments.update(fragment_counts(mols, canon))
                scaffolds.update(scaffold_counts(mols, canon))
                weights += [Descriptors.MolWt(m) for m in mols]
                update(len(chunk))
        fps = np.concatenate(fps) if fps else np.zeros((0, 1024), np.float32)  # (n_valid, 1024)
        return cls(n_valid, fps, fragments, scaffolds, np.array(weights, dtype=np.float64))

    def _sha256(self) -> str:
        h = hashlib.sha256(f"{self.n_valid}".encode())
        for a in (np.packbits(self.fps.astype(np.uint8), axis=1), np.ascontiguousarray(self.weights, np.float64)):
            h.update(f"{a.shape}".encode())
            h.update(a.tobytes())
        h.update(json.dumps([self.fragments, self.scaffolds], sort_keys=True).encode())
        return h.hexdigest()

    def save(self, path, reference: tuple[str, ...]) -> None:
        """Keep the features of ``reference`` at ``path``, atomically, with the format, the key they
        belong to (the molecules), their count and a checksum of every array and count."""
        from minitransformer.atomic import write_bytes
        meta = json.dumps({"format": _FORMAT, "key": _digest(reference), "n_valid": self.n_valid,
                           "sha256": self._sha256(), "fragments": self.fragments, "scaffolds": self.scaffolds})
        buffer = io.BytesIO()
        np.savez_compressed(buffer, fps=np.packbits(self.fps.astype(np.uint8), axis=1), weights=self.weights,
                            meta=np.frombuffer(meta.encode(), dtype=np.uint8))
        write_bytes(path, buffer.getvalue())

    @classmethod
    def load(cls, path, reference: tuple[str, ...]) -> "ReferenceFeatures":
        """The features of ``reference`` kept at ``path``; a ValueError unless the file is whole and theirs."""
        with np.load(path) as z:
            meta = parse_json(z["meta"].tobytes().decode())
            if not isinstance(meta, dict) or meta.get("format") != _FORMAT or meta.get("key") != _digest(reference):
                raise ValueError(f"{path}: not a {_FORMAT} file of this reference")
            fps = np.unpackbits(z["fps"], axis=1, count=1024).astype(np.float32)  # (n_valid, 1024)
            weights = z["weights"]  # (n_valid,)
        n = meta.get("n_valid")
        if not isinstance(n, int) or fps.shape[0] != n or weights.shape != (n,):
            raise ValueError(f"{path}: {fps.shape[0]} fingerprints and {weights.shape} weights for {n} molecules")
        features = cls(n, fps, Counter(meta["fragments"]), Counter(meta["scaffolds"]), weights)
        if features._sha256() != meta.get("sha256"):
            raise ValueError(f"{path}: its arrays do not match its checksum")
        return features

    @classmethod
    def cached(cls, reference: tuple[str, ...]) -> "ReferenceFeatures | None":
        """The features of ``reference`` the disk cache holds whole, or None."""
        try:
            return cls.load(cache_path(reference), reference)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None


def _digest(reference: tuple[str, ...]) -> str:
    h = hashlib.sha256(_FORMAT.encode())
    for s in reference:
        h.update(s.encode())
        h.update(b"\n")
    return h.hexdigest()


def cache_path(reference: tuple[str, ...]):
    """Where :func:`reference_features` keeps the features of a large ``reference`` on disk."""
    from minitransformer.chem.datasets.download import cache_dir
    return cache_dir() / "reference_features" / f"{_digest(reference)}.npz"


@functools.lru_cache(maxsize=3)
def reference_features(reference: tuple[str, ...]) -> ReferenceFeatures:
    """:class:`ReferenceFeatures` of ``reference``, cached in memory, and on disk for large ones."""
    if len(reference) < DISK_CACHE_MIN:
        return ReferenceFeatures.compute(reference)
    path = cache_path(reference)
    cached = ReferenceFeatures.cached(reference) if path.exists() else None
    if cached is not None:
        return cached  # (a damaged, edited or older file is recomputed and overwritten)
    features = ReferenceFeatures.compute(reference)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        features.save(path, reference)
    except OSError:
        pass  # a read-only cache only costs time
    return features
