r"""Scoring any set of generated SMILES: every generation metric in one report.

:func:`score_smiles` takes samples (ours or another generator's, see
:func:`~minitransformer.chem.user_files.read_user_smiles`) and, optionally, a
reference set (:func:`load_reference`: the training molecules, RDKit's drug-like
set, or a file). It reports the metrics of :func:`~minitransformer.chem.metrics.evaluate_samples`
and three more that compare the samples with the reference. Let :math:`G` be the
valid samples (duplicates kept) and :math:`R` the valid reference molecules.

SNN, similarity to a nearest neighbour
    .. math:: \mathrm{SNN} = \frac{1}{|G|} \sum_{g \in G} \max_{r \in R} T(g, r)

    with :math:`T` the Tanimoto similarity of Morgan radius-2, 1024-bit
    fingerprints. How close, on average, each sample comes to some reference
    molecule: 1 when every sample is in the reference (a copying model), low for
    samples from another part of chemical space.
Frag, fragment similarity
    .. math:: \mathrm{Frag} = \cos(c_G, c_R) = \frac{c_G \cdot c_R}{\lVert c_G \rVert \, \lVert c_R \rVert}

    where :math:`c_S[f]` counts the molecules of set :math:`S` that contain the
    BRICS fragment :math:`f` (BRICS cuts the bonds a chemist could make by a
    known reaction). 1 when both sets are built from the same pieces in the
    same proportions.
Scaf, scaffold similarity
    The same cosine over counts of Bemis-Murcko scaffolds (ring systems and the
    chains linking them, side chains removed). Acyclic molecules have no
    scaffold and are not counted.

These follow the definitions of the MOSES benchmark (Polykovskiy et al., 2020),
except how molecules are cut into BRICS fragments (see :func:`fragment_counts`).
A metric whose denominator is empty (no sample, no valid sample, no scaffold in
one set, no reference) is ``None`` rather than a made-up number.
"""
from __future__ import annotations

import functools
import math
import os
from collections import Counter
from typing import Sequence

import numpy as np

from minitransformer.chem._rdkit import quiet_rdkit, require_rdkit
from minitransformer.chem.metrics import _parse, evaluate_samples
from minitransformer.chem.similarity import morgan_bits, tanimoto_matrix

__all__ = ["score_smiles", "format_score", "load_reference", "read_samples",
           "snn", "fragment_counts", "scaffold_counts", "cosine_of_counts", "DEFINITIONS"]

# One line per metric, shown by :func:`format_score` (key -> (label, definition)).
DEFINITIONS = {
    "n_samples": ("samples", "lines read (blank lines and headers skipped)"),
    "validity": ("validity", "fraction of samples RDKit parses and sanitizes"),
    "uniqueness": ("uniqueness", "distinct canonical SMILES among the valid / valid"),
    "novelty": ("novelty", "distinct valid samples not in the reference / distinct valid"),
    "intdiv1": ("IntDiv1", "1 - mean Tanimoto over all pairs of valid samples (Morgan r=2, 1024 bits)"),
    "intdiv2": ("IntDiv2", "1 - (mean Tanimoto^2 over all pairs)^(1/2)"),
    "kl_score": ("KL score", "exp(-KL) of 10 descriptor distributions vs the reference, averaged (GuacaMol)"),
    "snn": ("SNN", "mean over valid samples of the largest Tanimoto to a reference molecule"),
    "frag": ("Frag", "cosine of BRICS-fragment counts, samples vs reference"),
    "scaf": ("Scaf", "cosine of Bemis-Murcko scaffold counts, samples vs reference"),
}
_SAMPLE_BLOCK = 1024  # samples per block of the nearest-neighbour search: memory block x |R| floats


# --------------------------------------------------------------------------- inputs
def load_reference(name_or_path: str | os.PathLike) -> list[str]:
    """The SMILES of a reference set: ``"tox21"`` (the training molecules, found as
    :func:`~minitransformer.chem.data.find_tox21` finds them: ``../shared/data``,
    ``$MINITRANSFORMER_DATA``, the cache, or a download), ``"druglike"`` (RDKit's
    bundled 10,000 drug-like molecules) or the path of a SMILES file."""
    from minitransformer.chem.data import load_source
    if name_or_path is None:
        raise ValueError("no reference given; name a file, or 'tox21' or 'druglike'")
    return load_source(name_or_path).smiles


def read_samples(path_or_dash: str | os.PathLike) -> list[str]:
    """The SMILES of a samples file (CSV, ``.smi``/``.txt``, gzipped or not, ``-`` for stdin)."""
    from minitransformer.chem.user_files import read_user_smiles
    return read_user_smiles(path_or_dash)[1]


# --------------------------------------------------------------------------- the three comparisons
def snn(sample_fps: np.ndarray, reference_fps: np.ndarray) -> float:
    """Mean over the rows of ``sample_fps`` (n, k) of the largest Tanimoto similarity to a
    row of ``reference_fps`` (m, k). Both need at least one row."""
    if len(sample_fps) == 0 or len(reference_fps) == 0:
        raise ValueError("SNN needs at least one sample and one reference fingerprint")
    best = np.concatenate([tanimoto_matrix(sample_fps[i:i + _SAMPLE_BLOCK], reference_fps).max(axis=1)
                           for i in range(0, len(sample_fps), _SAMPLE_BLOCK)])  # (n,)
    return float(best.mean(dtype=np.float64))


def fragment_counts(mols: Sequence) -> Counter:
    """For each BRICS fragment, how many of ``mols`` contain it.

    Every bond that matches a BRICS rule is cut at once
    (``BRICS.BreakBRICSBonds``), each cut end is capped with a dummy atom
    labelled by its rule (``[1*]``, ``[16*]`` ...), and the pieces are written
    as canonical SMILES. A molecule with no BRICS bond is its own single
    fragment. MOSES calls ``BRICS.BRICSDecompose`` instead, which cuts one bond
    at a time; the pieces differ where BRICS cuts a double bond (about 5% of
    drug-like molecules), so our Frag is close to, not identical with, the
    MOSES value. The one-shot cut is 4 times faster, and far faster on the
    large molecules of Tox21, where ``BRICSDecompose`` takes most of a minute.
    """
    Chem = require_rdkit()
    from rdkit.Chem import BRICS
    counts = Counter()
    with quiet_rdkit():
        for mol in mols:
            pieces = Chem.GetMolFrags(BRICS.BreakBRICSBonds(mol), asMols=True, sanitizeFrags=False)
            counts.update({Chem.MolToSmiles(piece) for piece in pieces})
    return counts


def scaffold_counts(mols: Sequence) -> Counter:
    """For each Bemis-Murcko scaffold (canonical SMILES, stereo dropped), how many of
    ``mols`` have it; acyclic molecules (empty scaffold) are left out."""
    require_rdkit()
    from rdkit.Chem.Scaffolds import MurckoScaffold
    counts = Counter()
    with quiet_rdkit():
        for mol in mols:
            try:
                scaffold = MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)
            except Exception:  # RDKit raises for a few odd valences; no scaffold then
                continue
            if scaffold:
                counts[scaffold] += 1
    return counts


def cosine_of_counts(a: Counter, b: Counter) -> float | None:
    r""":math:`\sum_k a_k b_k / (\lVert a \rVert \lVert b \rVert)` over the union of keys;
    None when either counter is empty (the angle is undefined)."""
    if not a or not b:
        return None
    dot = sum(count * b[key] for key, count in a.items() if key in b)
    norm = math.sqrt(sum(v * v for v in a.values())) * math.sqrt(sum(v * v for v in b.values()))
    return float(dot / norm)


class _ReferenceFeatures:
    """Fingerprints, fragment counts and scaffold counts of a reference set, computed
    once per reference (the reference is usually the same for many calls)."""

    def __init__(self, reference: tuple[str, ...]):
        mols, _ = _parse(reference)
        self.n_valid = len(mols)
        self.fps = morgan_bits(mols)  # (m, 1024)
        self.fragments = fragment_counts(mols)
        self.scaffolds = scaffold_counts(mols)


@functools.lru_cache(maxsize=2)
def _reference_features(reference: tuple[str, ...]) -> _ReferenceFeatures:
    return _ReferenceFeatures(reference)


# --------------------------------------------------------------------------- the report
def score_smiles(samples: Sequence[str], reference: Sequence[str] | None, seed: int = 0) -> dict:
    """All generation metrics of ``samples``, against ``reference`` when one is given.

    Returns a JSON-ready dict: the fractions ``validity``, ``uniqueness``,
    ``novelty``, ``intdiv1``, ``intdiv2``, ``kl_score``, ``snn``, ``frag``,
    ``scaf`` (floats in [0, 1], or None when undefined: no sample, no valid
    sample, no reference, fewer than two distinct valid samples for the KL
    score), and the counts ``n_samples``, ``n_valid``, ``n_unique``,
    ``n_novel`` (None without a reference), ``n_reference`` (all reference
    strings), ``n_reference_valid`` and ``n_kl_reference`` (reference
    molecules drawn for the KL score with ``seed``). Strings are stripped;
    empty strings and bad SMILES count as invalid samples, never as errors.
    """
    samples = [s.strip() if isinstance(s, str) else "" for s in samples]
    has_ref = reference is not None and len(reference) > 0
    reference = [s.strip() for s in reference] if has_ref else []
    base = evaluate_samples(samples, reference, seed=seed)
    n, n_valid, n_unique = base["n_samples"], base["n_valid"], base["n_unique"]
    result = {
        "n_samples": n,
        "n_valid": n_valid,
        "n_unique": n_unique,
        "n_novel": base["n_novel"] if has_ref else None,
        "n_reference": len(reference) if has_ref else None,
        "n_reference_valid": None,
        "n_kl_reference": base["n_reference"] if has_ref else None,
        "validity": base["validity"] if n else None,
        "uniqueness": base["uniqueness"] if n_valid else None,
        "novelty": base["novelty"] if (has_ref and n_valid) else None,
        "intdiv1": base["intdiv1"] if n_valid else None,
        "intdiv2": base["intdiv2"] if n_valid else None,
        "kl_score": base["kl_score"] if (has_ref and base["n_reference"] >= 2) else None,
        "snn": None,
        "frag": None,
        "scaf": None,
        "seed": seed,
    }
    if has_ref:
        ref = _reference_features(tuple(reference))
        result["n_reference_valid"] = ref.n_valid
        mols, _ = _parse(samples)
        if mols and ref.n_valid:
            result["snn"] = snn(morgan_bits(mols), ref.fps)
            result["frag"] = cosine_of_counts(fragment_counts(mols), ref.fragments)
            result["scaf"] = cosine_of_counts(scaffold_counts(mols), ref.scaffolds)
    return result


def _value(result: dict, key: str) -> str:
    value = result.get(key)
    if value is None:
        return "n/a"
    if key == "n_samples":
        return str(value)
    return f"{value:.4f}"


def _note(result: dict, key: str) -> str:
    """Counts behind a fraction, e.g. ``(812 of 1000)``, or why it is n/a."""
    r = result
    if key == "validity" and r["n_samples"]:
        return f"{r['n_valid']} of {r['n_samples']}"
    if key == "uniqueness" and r["n_valid"]:
        return f"{r['n_unique']} of {r['n_valid']}"
    if key == "novelty" and r.get("n_novel") is not None and r["n_unique"]:
        return f"{r['n_novel']} of {r['n_unique']}"
    if r.get(key) is not None:
        return ""
    if key in ("novelty", "kl_score", "snn", "frag", "scaf") and r.get("n_reference") is None:
        return "no reference"
    if key == "kl_score":
        return "needs 2 distinct valid samples"
    if key == "scaf":
        return "no ring scaffold in one set"
    return "no valid sample"


def format_score(result: dict) -> str:
    """A text table of :func:`score_smiles` output: metric, value, counts, one-line definition."""
    rows = [(label, _value(result, key), _note(result, key), definition)
            for key, (label, definition) in DEFINITIONS.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:<{widths[2]}}  {d}".rstrip() for a, b, c, d in rows]
    if result.get("n_reference") is not None:
        lines.append(f"reference: {result['n_reference']} SMILES, {result['n_reference_valid']} valid; "
                     f"KL score against {result['n_kl_reference']} of them drawn with seed {result['seed']}")
    return "\n".join(lines)
