"""Reading the user's own SMILES: a CSV, a ``.smi`` file, or standard input.

The ``score`` and ``predict`` commands take molecules from anywhere: our own
samples, another generator's output, a spreadsheet export. :func:`read_user_smiles`
accepts all of them and keeps every molecule's name, so each output row can be
traced back to its input row.

``.csv`` / ``.csv.gz``
    A header row; the SMILES column is found by name as in
    :func:`~minitransformer.chem.data.read_smiles` (``smiles`` in any case, else the
    first column whose name contains it). An identifier column, if there is one
    (``id``, ``name``, ``mol_id``, ``compound_id``, any case), gives the names.
``.smi`` / ``.txt`` (optionally ``.gz``)
    One molecule per line: the SMILES, then optionally white space and a name.
    Blank lines and ``#`` comments are skipped, and so is a first line whose first
    field is ``smiles`` (any case), a header some tools write.
``-``
    Standard input, read as a CSV when its first line has a ``smiles`` field among
    comma-separated fields, else line by line as a ``.smi`` file.

Rows are never dropped for holding a bad SMILES: validity is for the caller to judge.
"""
from __future__ import annotations

import csv
import io
import os
import sys
from pathlib import Path

from minitransformer.chem.data import (_CSV_SUFFIXES, _LINE_SUFFIXES, _check_file, _first_field,
                                       _read_text, _smiles_column)

__all__ = ["read_user_smiles", "ID_COLUMNS"]

ID_COLUMNS = ("id", "name", "mol_id", "compound_id")


def _from_csv_text(text: str, where: str) -> tuple[list[str], list[str]]:
    rows = csv.reader(io.StringIO(text, newline=""))
    header = next(rows, None)
    if header is None:
        return [], []
    col = _smiles_column(header, where)
    names = [h.strip().lower() for h in header]
    id_col = next((names.index(n) for n in ID_COLUMNS if n in names), None)
    ids, smiles = [], []
    for row in rows:
        if not row or not any(cell.strip() for cell in row):
            continue  # a blank line
        smiles.append(_first_field(row[col]) if col < len(row) else "")
        ids.append(row[id_col].strip() if id_col is not None and id_col < len(row) else "")
    return ids, smiles


def _from_lines(text: str) -> tuple[list[str], list[str]]:
    ids, smiles = [], []
    for line in text.splitlines():
        fields = line.split(maxsplit=1)
        if not fields or fields[0].startswith("#"):
            continue
        if not smiles and fields[0].lower() == "smiles":
            continue  # a header line
        smiles.append(fields[0])
        ids.append(fields[1].strip() if len(fields) > 1 else "")
    return ids, smiles


def _looks_like_csv(text: str) -> bool:
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    return "," in first and any("smiles" in f.strip().lower() for f in first.split(","))


def read_user_smiles(path_or_dash: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Molecule names and SMILES of a user's file (``"-"``: standard input), in file order.

    Returns ``(ids, smiles)``, two lists of the same length. ``ids[i]`` is the
    molecule's name or identifier, ``""`` when the file gives none. A gzipped
    file (``.gz``) is decompressed; a UTF-8 byte-order mark is dropped. A missing
    file, a folder, an unknown suffix or a CSV without a SMILES column raises an
    error with a one-line message naming the file.
    """
    if str(path_or_dash) == "-":
        text = sys.stdin.read().lstrip("\ufeff")
        return _from_csv_text(text, "<stdin>") if _looks_like_csv(text) else _from_lines(text)
    path = Path(path_or_dash)
    _check_file(path)
    name = path.name.lower()
    if name.endswith(_CSV_SUFFIXES):
        return _from_csv_text(_read_text(path), path)
    if name.endswith(_LINE_SUFFIXES):
        return _from_lines(_read_text(path))
    raise ValueError(f"{path}: unknown file type; expected one of {', '.join(_CSV_SUFFIXES + _LINE_SUFFIXES)} "
                     "or '-' for standard input")
