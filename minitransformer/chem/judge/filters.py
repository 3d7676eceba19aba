r"""MOSES's "Filters" metric: the fraction of valid molecules a medicinal chemist would keep.

MOSES (Polykovskiy et al., 2020) built its data set by removing molecules that
fail a list of structural alerts, and scores a generator by how many of its
valid samples would have survived the same cleaning:

.. math:: \mathrm{Filters} = \frac{1}{|G|} \sum_{g \in G} [\, g \text{ passes} \,]

over the valid samples :math:`G`, duplicates kept. A molecule passes when
**all** of these hold (the rules of MOSES's ``mol_passes_filters``):

1. no ring of 8 or more atoms (RDKit's smallest set of smallest rings);
2. no atom carries a formal charge;
3. every atom is one of C, N, S, O, F, Cl, Br, H;
4. no substructure alert matches the molecule *with explicit hydrogens*
   (many alerts spell out ``[#1]``): the MCF alerts (medicinal-chemistry
   filters) and the PAINS alerts (pan-assay interference compounds);
5. the molecule can be written as a (non-stereo) SMILES that RDKit reads back.

The alerts are SMARTS patterns shipped by MOSES in two files, ``mcf.csv``
(header ``names,smarts``) and ``wehi_pains.csv`` (no header; ``smarts,name``).
This module does not fetch them: :func:`load_filters` reads the two paths it is
given (see ``minitransformer.chem.datasets.moses.moses_filter_files`` for where they come
from).
"""
from __future__ import annotations

import csv
import os
from typing import Sequence

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit

__all__ = ["ALLOWED_ATOMS", "read_alerts", "load_filters", "passes_filters", "fraction_passes_filters",
           "default_filters"]

ALLOWED_ATOMS = frozenset({"C", "N", "S", "O", "F", "Cl", "Br", "H"})
MAX_RING_SIZE = 7


def read_alerts(mcf_path: str | os.PathLike, pains_path: str | os.PathLike) -> list[str]:
    """The SMARTS strings of MOSES's two alert files: MCF (with a header) then PAINS (without)."""
    with open(mcf_path, newline="") as f:
        rows = list(csv.reader(f))
    header = [cell.strip() for cell in rows[0]] if rows else []
    if "smarts" not in header:
        raise ValueError(f"{mcf_path}: expected a header with a 'smarts' column, got {header}")
    col = header.index("smarts")
    smarts = [row[col].strip() for row in rows[1:] if len(row) > col and row[col].strip()]
    with open(pains_path, newline="") as f:
        smarts += [row[0].strip() for row in csv.reader(f) if row and row[0].strip()]
    return smarts


def load_filters(mcf_path: str | os.PathLike, pains_path: str | os.PathLike) -> list:
    """The alerts of :func:`read_alerts` compiled into RDKit query molecules."""
    Chem = require_rdkit()
    queries = []
    for s in read_alerts(mcf_path, pains_path):
        query = Chem.MolFromSmarts(s)
        if query is None:
            raise ValueError(f"unreadable SMARTS alert in {mcf_path} or {pains_path}: {s!r}")
        queries.append(query)
    return queries


def passes_filters(mol, filters: Sequence) -> bool:
    """True when RDKit molecule ``mol`` passes MOSES's five rules (module docstring) with the
    compiled alerts ``filters`` (from :func:`load_filters`)."""
    Chem = require_rdkit()
    if mol is None:
        return False
    if any(len(ring) > MAX_RING_SIZE for ring in mol.GetRingInfo().AtomRings()):
        return False
    if any(atom.GetFormalCharge() != 0 for atom in mol.GetAtoms()):
        return False
    if any(atom.GetSymbol() not in ALLOWED_ATOMS for atom in mol.GetAtoms()):
        return False
    with_h = Chem.AddHs(mol)
    if any(with_h.HasSubstructMatch(query) for query in filters):
        return False
    smiles = Chem.MolToSmiles(mol, isomericSmiles=False)
    return mol_from_smiles(smiles) is not None


def fraction_passes_filters(mols: Sequence, filters: Sequence) -> float | None:
    """Fraction of ``mols`` (valid molecules, duplicates kept) that pass; None for no molecule."""
    if not mols:
        return None
    with quiet_rdkit():
        return sum(passes_filters(m, filters) for m in mols) / len(mols)


_DEFAULT: dict = {}


def default_filters(download: bool = True) -> tuple[list | None, str]:
    """MOSES's alerts from ``minitransformer.chem.datasets.moses.moses_filter_files``, compiled once:
    ``(queries, "")``, or ``(None, reason)`` when that module or its files are unavailable
    (the metric is then reported as None with the reason, never guessed)."""
    if download in _DEFAULT:
        return _DEFAULT[download]
    try:
        from minitransformer.chem.datasets.moses import moses_filter_files
        mcf, pains = moses_filter_files(download=download)
        result = (load_filters(mcf, pains), "")
    except ImportError:
        result = (None, "MOSES alert files unavailable (minitransformer.chem.datasets.moses missing)")
    except Exception as exc:  # absent files, no network, unreadable CSV: say which, one line
        result = (None, f"MOSES alert files unavailable: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    _DEFAULT[download] = result
    return result
