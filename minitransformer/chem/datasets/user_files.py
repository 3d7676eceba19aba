"""Reading the user's own SMILES: a CSV, a ``.smi`` file, or standard input.

The ``score``, ``predict`` and ``translate`` commands take molecules from anywhere:
our own samples, another generator's output, a spreadsheet export. They read them
with the one reader of SMILES files
(:func:`~minitransformer.chem.datasets.smiles_files.read_smiles_file`, whose docstring gives
the formats) under the policy for samples: **every line is a sample**, a blank one
too, and so is a line that starts with ``#``; names are kept, so each output row
can be traced back to its input row. Rows are never dropped for holding a bad
SMILES: validity is for the caller to judge.
"""
from __future__ import annotations

import os

from minitransformer.chem.datasets.smiles_files import ID_COLUMNS, SmilesFile, read_smiles_file

__all__ = ["read_user_smiles", "read_user_file", "UserSmiles", "ID_COLUMNS"]

#: What a user's file holds (the one reader's :class:`~minitransformer.chem.datasets.smiles_files.SmilesFile`).
UserSmiles = SmilesFile


def read_user_smiles(path_or_dash: str | os.PathLike) -> tuple[list[str], list[str]]:
    """Molecule names and SMILES of a user's file (``"-"``: standard input), in file order.

    Returns ``(ids, smiles)``, two lists of the same length. ``ids[i]`` is the
    molecule's name or identifier, ``""`` when the file gives none. See
    :func:`read_user_file` (which also says what was skipped).
    """
    found = read_user_file(path_or_dash)
    return found.ids, found.smiles


def read_user_file(path_or_dash: str | os.PathLike) -> SmilesFile:
    """A user's file (``"-"``: standard input): the one reader,
    :func:`~minitransformer.chem.datasets.smiles_files.read_smiles_file`, with every line a sample."""
    return read_smiles_file(path_or_dash, every_line=True, hint="give a .smi or .csv file, or - for standard input")
