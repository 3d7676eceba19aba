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
    **Every line is a sample**, a blank one too: a generator that wrote nothing
    wrote an empty sample, and MOSES counts it as invalid; so is a line that
    starts with ``#`` (a broken sample can start with a triple bond). The one
    line skipped is a first line whose first field is ``smiles`` (any case), a
    header some tools write; :class:`UserSmiles` says whether there was one.
``-``
    Standard input, read as a CSV when its first line has a ``smiles`` field among
    comma-separated fields, else line by line as a ``.smi`` file.

Rows are never dropped for holding a bad SMILES: validity is for the caller to
judge. A CSV row with no cell at all (a blank line) holds no sample and is
skipped, counted in :class:`UserSmiles`. Cells may be of any length (the csv
module's 131,072-character limit is lifted while reading); a SMILES too long
for RDKit is an invalid sample, see :func:`~minitransformer.chem._rdkit.smiles_problem`.
"""
from __future__ import annotations

import csv
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from minitransformer.chem.data import (_CSV_SUFFIXES, _LINE_SUFFIXES, _check_file, _first_field,
                                       _read_text, _smiles_column, csv_rows)

__all__ = ["read_user_smiles", "read_user_file", "UserSmiles", "ID_COLUMNS"]

ID_COLUMNS = ("id", "name", "mol_id", "compound_id")


@dataclass
class UserSmiles:
    """What a user's file holds: ``ids`` and ``smiles`` (same length, file order), and what
    was skipped: ``header`` (a header line of a ``.smi`` file, or a CSV's header row) and
    ``blank_rows`` (CSV rows with no cell)."""
    ids: list
    smiles: list
    header: bool = False
    blank_rows: int = 0

    def skipped(self) -> str:
        """The skipped lines in words, "" when none (for a report)."""
        parts = (["a header line"] if self.header else []) + \
            ([f"{self.blank_rows} blank CSV row{'s' * (self.blank_rows != 1)}"] if self.blank_rows else [])
        return " and ".join(parts)


def _from_csv_text(text: str, where: str) -> UserSmiles:
    with csv_rows(io.StringIO(text, newline="")) as rows:
        header = next(rows, None)
        if header is None:
            return UserSmiles([], [])
        col = _smiles_column(header, where)
        names = [h.strip().lower() for h in header]
        id_col = next((names.index(n) for n in ID_COLUMNS if n in names), None)
        out = UserSmiles([], [], header=True)
        for row in rows:
            if not row:
                out.blank_rows += 1  # a blank line: no cell, no sample
                continue
            out.smiles.append(_first_field(row[col]) if col < len(row) else "")
            out.ids.append(row[id_col].strip() if id_col is not None and id_col < len(row) else "")
    return out


def _from_lines(text: str) -> UserSmiles:
    lines = text.splitlines()
    first = lines[0].split(maxsplit=1) if lines else []
    header = bool(first) and first[0].lower() == "smiles"
    out = UserSmiles([], [], header=header)
    for line in lines[1:] if header else lines:
        fields = line.split(maxsplit=1)
        out.smiles.append(fields[0] if fields else "")  # a blank line is an empty sample
        out.ids.append(fields[1].strip() if len(fields) > 1 else "")
    return out


def _stdin_text() -> str:
    """Standard input as UTF-8 text; binary, UTF-16 or gzipped input is a one-line ValueError."""
    raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8", "replace")
    if raw[:2] == b"\x1f\x8b":
        raise ValueError("standard input is gzip-compressed; decompress it first (zcat FILE | ...) or give the "
                         ".gz file's name instead of -")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ValueError(f"standard input is not UTF-8 text (byte {exc.start}, line {line}); give SMILES as "
                         "plain text, one per line") from None


def _looks_like_csv(text: str) -> bool:
    first = text.lstrip("\ufeff").split("\n", 1)[0]
    return "," in first and any("smiles" in f.strip().lower() for f in first.split(","))


def read_user_smiles(path_or_dash: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Molecule names and SMILES of a user's file (``"-"``: standard input), in file order.

    Returns ``(ids, smiles)``, two lists of the same length. ``ids[i]`` is the
    molecule's name or identifier, ``""`` when the file gives none. See
    :func:`read_user_file` (which also says what was skipped).
    """
    found = read_user_file(path_or_dash)
    return found.ids, found.smiles


def read_user_file(path_or_dash: str | os.PathLike) -> UserSmiles:
    """A user's file (``"-"``: standard input) as :class:`UserSmiles`.

    A gzipped file (``.gz``) is decompressed; a UTF-8 byte-order mark is dropped.
    A missing file, a folder, an unknown suffix, text that is not UTF-8 or a CSV
    without a SMILES column raises an error with a one-line message naming the file.
    """
    if str(path_or_dash) == "-":
        text = _stdin_text()
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
