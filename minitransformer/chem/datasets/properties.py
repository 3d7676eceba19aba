"""Molecules with property labels: Tox21's twelve assays, or any labelled CSV.

A property table is a SMILES column plus one column per task ("assay"). In
Tox21 each of the 12 columns holds 1 (active), 0 (inactive) or nothing (the
molecule was not tested in that assay, about 17% of the cells). Missing labels
stay missing: they become NaN in the label matrix, and the loss and the metrics
skip them (see :mod:`minitransformer.nn.bce` and
:func:`minitransformer.roc_auc.multilabel_roc_auc`).

:func:`load_labelled` reads such a table and cleans it with the same rules as
the language-model data (:func:`~minitransformer.chem.datasets.data.clean_indices`),
keeping labels aligned with their molecules. Two splits are offered:

* :func:`~minitransformer.chem.datasets.data.split_random` on row indices (seeded), and
* :func:`scaffold_split`: molecules are grouped by their Bemis–Murcko scaffold
  (the ring systems and the chains that link them, side chains removed), and
  whole groups go to one split, largest groups to training first. Test
  molecules then have scaffolds never seen in training, a harder and more
  honest test of generalisation than a random split.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit
from minitransformer.chem.datasets.data import clean_indices
from minitransformer.chem.datasets.smiles_files import ID_COLUMNS, read_smiles_file
from minitransformer.chem.datasets.download import find_tox21

__all__ = ["TOX21_TASKS", "LabelledSmiles", "read_labelled", "load_labelled", "murcko_scaffold",
           "scaffold_split"]

TOX21_TASKS = ("NR-AR", "NR-AR-LBD", "NR-AhR", "NR-Aromatase", "NR-ER", "NR-ER-LBD", "NR-PPAR-gamma",
               "SR-ARE", "SR-ATAD5", "SR-HSE", "SR-MMP", "SR-p53")


@dataclass
class LabelledSmiles:
    """SMILES, their labels (N, K) with NaN where missing, the task names, and the source."""

    smiles: list
    labels: np.ndarray
    tasks: list
    description: str
    clean_summary: str = ""

    def take(self, index: Sequence[int]) -> "LabelledSmiles":
        """The rows ``index``, in that order."""
        index = list(index)
        return LabelledSmiles([self.smiles[i] for i in index], self.labels[index], self.tasks,
                              self.description, self.clean_summary)


def _label(cell: str, path: Path, column: str, row: int) -> float:
    cell = cell.strip()
    if cell == "":
        return np.nan
    try:
        value = float(cell)
    except ValueError:
        raise ValueError(f"{path}: column {column!r}, data row {row}: label {cell!r} is not a number; "
                         "labels must be 0, 1 or empty (missing)") from None
    if value not in (0.0, 1.0):
        raise ValueError(f"{path}: column {column!r}, data row {row}: label {cell!r} is not 0 or 1; "
                         "train property predicts binary labels: give 0, 1 or leave the cell empty (missing)")
    return value


def read_labelled(path: str | os.PathLike, tasks: Sequence[str] | None = None) -> LabelledSmiles:
    """Read a CSV (``.csv`` / ``.csv.gz``) with a SMILES column and binary label columns.

    ``tasks`` names the label columns; by default every column except the SMILES
    column and identifier columns (``mol_id``, ``id``, ``name``) is a task. Empty
    cells are missing labels (NaN). Raises FileNotFoundError for a missing file and
    ValueError naming the column and row of a label that is not 0, 1 or empty.
    """
    path = Path(path)
    if not path.name.lower().endswith((".csv", ".csv.gz")) and path.is_file():
        raise ValueError(f"{path}: property data must be a .csv or .csv.gz file with a smiles column "
                         "and one column per label")
    table = read_smiles_file(path, what="labelled SMILES file", hint="use data='tox21'")
    if not table.columns:
        raise ValueError(f"{path}: the file is empty (no header, no SMILES); give a CSV with a smiles column "
                         "and one column per label")
    header, body = table.columns, table.rows
    if not body:
        raise ValueError(f"{path} holds no SMILES (only the header row {header})")
    s_col = table.smiles_column
    if tasks is None:
        t_cols = [i for i, name in enumerate(header)
                  if i != s_col and name.strip().lower() not in ID_COLUMNS]
    else:
        missing = [t for t in tasks if t not in header]
        if missing:
            raise ValueError(f"{path}: no label column(s) {missing}; the columns are {header}")
        t_cols = [header.index(t) for t in tasks]
    if not t_cols:
        raise ValueError(f"{path}: no label columns besides the SMILES; the columns are {header}")
    named = [n.strip() for n in header]  # a task in two columns, named or found: which one holds it is unsaid
    twice = sorted({named[c] for c in t_cols if named.count(named[c]) > 1})
    if twice:
        raise ValueError(f"{path}: the label column {twice[0]!r} appears {named.count(twice[0])} times; give each "
                         "task one column (rename or drop the others)")
    labels = np.full((len(body), len(t_cols)), np.nan)  # (N, K)
    for r, row in enumerate(body):
        for k, c in enumerate(t_cols):
            if c < len(row):
                labels[r, k] = _label(row[c], path, header[c], r + 1)
    return LabelledSmiles(table.smiles, labels, [header[c] for c in t_cols], f"file {path}")


def load_labelled(data: str | os.PathLike | None = None, max_len: int | None = None,
                  download: bool = True, log=print) -> LabelledSmiles:
    """Load and clean a labelled data set: ``"tox21"`` (the default) or a CSV path.

    Molecules RDKit cannot parse, empty cells and (with ``max_len``) SMILES longer
    than ``max_len`` characters are dropped, with their labels; the counts are logged.
    A molecule with no label at all carries no signal and is dropped too.
    """
    if data is None or (isinstance(data, str) and data.lower() == "tox21"):
        path = find_tox21(download=download)
        table = read_labelled(path, tasks=TOX21_TASKS)
        table.description = f"Tox21 (MoleculeNet), {path}"
    elif isinstance(data, str) and data.lower() == "druglike":
        raise ValueError("the drug-like set has no property labels; use --data tox21 or a CSV with a "
                         "smiles column and 0/1 label columns")
    else:
        table = read_labelled(data)
    try:
        index, report = clean_indices(table.smiles, min_len=None, max_len=max_len, check_rdkit=True)
    except ValueError as err:  # nothing usable: say which data it was
        raise ValueError(f"{table.description}: {err}") from None
    labelled = [i for i in index if not np.isnan(table.labels[i]).all()]
    summary = report.summary()
    if len(labelled) < len(index):
        summary += f"; {len(index) - len(labelled)} without any label dropped"
    if not labelled:
        raise ValueError(f"{table.description}: no labelled molecules left after cleaning: {summary}")
    out = table.take(labelled)
    out.clean_summary = summary
    log(f"data: {out.description}")
    log(f"cleaning: {summary}")
    return out


def murcko_scaffold(smiles: str) -> str:
    """Canonical SMILES of the Bemis–Murcko scaffold ("" for an acyclic molecule)."""
    require_rdkit()
    from rdkit.Chem.Scaffolds import MurckoScaffold
    mol = mol_from_smiles(smiles)
    if mol is None:
        raise ValueError(f"RDKit cannot parse {smiles!r}")
    return MurckoScaffold.MurckoScaffoldSmiles(mol=mol, includeChirality=False)


def scaffold_split(smiles: Sequence[str], fractions=(0.8, 0.1, 0.1)) -> tuple[list, list, list]:
    """Split row indices so that molecules sharing a scaffold share a split.

    Groups are sorted by size (largest first; ties by first appearance) and
    poured into train until it would pass ``fractions[0]`` of the rows, then into
    validation, then test (the usual deterministic protocol of MoleculeNet).
    Returns three sorted lists of indices.
    """
    fractions = tuple(float(f) for f in fractions)
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    groups: dict[str, list[int]] = {}
    with quiet_rdkit():
        for i, s in enumerate(smiles):
            groups.setdefault(murcko_scaffold(s), []).append(i)
    ordered = sorted(groups.values(), key=lambda g: (-len(g), g[0]))
    n = len(smiles)
    train, val, test = [], [], []
    for group in ordered:
        if len(train) + len(group) <= fractions[0] * n:
            train += group
        elif len(val) + len(group) <= fractions[1] * n:
            val += group
        else:
            test += group
    return sorted(train), sorted(val), sorted(test)


def split_rows(smiles: Sequence[str], how: str, seed: int) -> tuple[list, list, list]:
    """Row indices of train / validation / test (80/10/10): ``how`` is ``"random"`` (seeded)
    or ``"scaffold"`` (:func:`scaffold_split`, the same for every seed)."""
    from minitransformer.chem.datasets.data import split_random
    if how == "scaffold":
        return scaffold_split(smiles)
    if how != "random":
        raise ValueError(f"split must be 'random' or 'scaffold', got {how!r}")
    return split_random(list(range(len(smiles))), (0.8, 0.1, 0.1), seed)
