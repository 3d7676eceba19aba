"""SMILES data: where it comes from, reading it, cleaning it, splitting it.

The pipeline a training script runs, in order:

1. :func:`load_source` picks a data set and reads its raw SMILES strings with
   :func:`read_smiles`. Built-in sources are ``"tox21"`` (the MoleculeNet
   Tox21 table, located or downloaded by :func:`find_tox21`) and
   ``"druglike"`` (10,000 drug-like SMILES from the WEHI screening library that
   ship inside RDKit, so they need no network; see :func:`druglike_path`) and
   ``"moses"`` (the 1.58M training molecules of the MOSES benchmark, see
   :mod:`minitransformer.chem.moses`).
2. :func:`clean_smiles` drops empty strings, strings outside a length window
   (in characters) and strings RDKit cannot parse, and reports how many went
   for each reason. It keeps the input order.
3. :func:`split_in_order` cuts the cleaned list into train/validation/test in
   file order (the protocol of the reference experiment), or
   :func:`split_random` shuffles first.

Two helpers on single molecules complete it: :func:`canonical` writes RDKit's
canonical SMILES (one string per molecule, used to compare molecules) and
:func:`randomize_smiles` writes a random but valid SMILES of the same molecule
(data augmentation), deterministically for a given NumPy generator.
"""
from __future__ import annotations

import codecs
import contextlib
import csv
import gzip
import io
import os
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit
from minitransformer.chem.download import ChecksumError, DownloadError, find_tox21

__all__ = [
    "find_tox21", "druglike_path", "read_smiles", "load_source", "LoadedSmiles",
    "clean_smiles", "clean_indices", "CleanReport", "split_in_order", "split_random",
    "randomize_smiles", "canonical",
]

_CSV_SUFFIXES = (".csv", ".csv.gz")
_LINE_SUFFIXES = (".smi", ".smi.gz", ".txt", ".txt.gz")


# --------------------------------------------------------------------------- sources
def druglike_path() -> Path:
    """Path of RDKit's bundled ``wehi_mols.csv`` (10,000 drug-like SMILES, no header).

    The file lives under ``rdkit/Data/Pains/test_data/`` in RDKit's data
    directory (``rdkit.RDConfig.RDDataDir``); the package directory is tried as
    a fallback for installations where RDConfig points elsewhere.
    """
    require_rdkit()
    import rdkit
    from rdkit import RDConfig

    relative = Path("Pains", "test_data", "wehi_mols.csv")
    roots = [Path(RDConfig.RDDataDir), Path(rdkit.__file__).parent / "Data"]
    for root in roots:
        if (root / relative).is_file():
            return root / relative
    raise FileNotFoundError(
        f"RDKit's drug-like set {relative} was not found under {', '.join(map(str, roots))}; "
        "this RDKit installation may omit its data files."
    )


@contextlib.contextmanager
def csv_rows(f):
    """``csv.reader(f)`` with the csv module's field limit (131,072 characters) lifted for the
    block: a cell holds whatever the file holds, and a SMILES too long for RDKit is judged by
    :func:`~minitransformer.chem._rdkit.smiles_problem`, not refused by the reader."""
    old = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)
    try:
        yield csv.reader(f)
    finally:
        csv.field_size_limit(old)


def _check_file(path: Path, what: str = "SMILES file") -> None:
    """FileNotFoundError for a missing path, IsADirectoryError for a folder; each names the path."""
    if path.is_dir():
        raise IsADirectoryError(f"{what} {path} is a folder, not a file; give the path of the file inside it")
    if not path.is_file():
        raise FileNotFoundError(f"{what} not found: {path} (resolved: {path.resolve()}). "
                                "Check the path, or use data='tox21' or data='druglike'.")


def _read_text(path: Path) -> str:
    """The whole text of ``path`` (gunzipped when it ends in ``.gz``), decoded as UTF-8.

    A UTF-8 byte-order mark at the start is dropped (``utf-8-sig``): spreadsheet
    programs write one, and it must not become part of the first SMILES or column
    name. Errors name the file: a damaged gzip file raises ValueError, and so does
    text that is not UTF-8 (with the line of the first bad byte).
    """
    raw = path.read_bytes()
    if path.name.lower().endswith(".gz"):
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError; EOFError: truncated
            raise ValueError(f"{path} is not a readable gzip file ({type(exc).__name__}: {exc}); it may be "
                             "truncated or not compressed at all. Download it again, or remove the .gz "
                             "suffix if it is plain text") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        bom = 3 if raw.startswith(codecs.BOM_UTF8) else 0
        start = exc.start + bom  # the position in ``raw``
        line = raw.count(b"\n", 0, start) + 1
        column = start - (raw.rfind(b"\n", 0, start) + 1) + 1
        raise ValueError(f"{path}, line {line}: not UTF-8 text (byte 0x{raw[start]:02x} at column {column}); "
                         "save the file as UTF-8") from None


def _open_text(path: Path):
    """``path`` as a text stream for the csv module (see :func:`_read_text`)."""
    return io.StringIO(_read_text(path), newline="")


def _first_field(cell: str) -> str:
    """The SMILES of a cell or line: its first white-space separated field ("" if none).
    A SMILES never contains white space; what follows it is a name (RDKit reads it so too)."""
    fields = cell.split()
    return fields[0] if fields else ""


def _smiles_column(header: list[str], path: Path) -> int:
    """Index of the SMILES column: a name equal to 'smiles', else one containing it (any case)."""
    names = [h.strip().lower() for h in header]
    for i, name in enumerate(names):
        if name == "smiles":
            return i
    for i, name in enumerate(names):
        if "smiles" in name:
            print(f"{path}: no column is named 'smiles'; using column {header[i].strip()!r} as the SMILES",
                  file=sys.stderr)
            return i
    shown = ", ".join(repr(h.strip()) for h in header[:8]) + (", ..." if len(header) > 8 else "")
    raise ValueError(f"{path}: no SMILES column (the columns are {shown}); rename the SMILES column to "
                     "'smiles' (any case), or give a .smi file with one SMILES per line")


def read_smiles(path: str | os.PathLike, column: str | int | None = None,
                header: bool = True) -> list[str]:
    """Read the SMILES strings of a file, in file order.

    ``.csv`` / ``.csv.gz``
        Parsed with the :mod:`csv` module. The SMILES column is ``column`` (a
        name, or a 0-based index) or else found by name: the column called
        ``smiles`` in any case, or failing that the first whose name contains
        it (``canonical_smiles``). Without one, ValueError lists the columns.
        ``header=False`` reads a file without a header row (then ``column``
        is an index, default 0). Cells are stripped of surrounding white
        space, and only their first white-space separated field is kept (a
        SMILES has no white space; RDKit would read the rest as a name); empty
        cells are kept as ``""`` so that cleaning can count them.
    ``.smi`` / ``.txt`` (optionally ``.gz``)
        One molecule per line; the first white-space separated field is the
        SMILES. Blank lines and lines starting with ``#`` are skipped.

    Files are read as UTF-8; a byte-order mark is dropped. A folder raises
    IsADirectoryError, a missing file FileNotFoundError, a damaged ``.gz`` or
    text that is not UTF-8 ValueError naming the file (and the line).
    """
    path = Path(path)
    _check_file(path)
    name = path.name.lower()
    if name.endswith(_CSV_SUFFIXES):
        with _open_text(path) as f, csv_rows(f) as rows:
            if header:
                head = next(rows, None)
                if head is None:
                    return []
                if column is None:
                    index = _smiles_column(head, path)
                elif isinstance(column, int):
                    index = column
                else:
                    lowered = [h.strip().lower() for h in head]
                    if column.lower() not in lowered:
                        raise ValueError(f"{path}: no column {column!r}; the columns are {head}")
                    index = lowered.index(column.lower())
            else:
                if isinstance(column, str):
                    raise ValueError("a file without a header needs column as an index")
                index = 0 if column is None else column
            return [_first_field(row[index]) if index < len(row) else "" for row in rows if row]
    if name.endswith(_LINE_SUFFIXES):
        out = []
        with _open_text(path) as f:
            for line in f:
                fields = line.split()
                if fields and not fields[0].startswith("#"):
                    out.append(fields[0])
        return out
    raise ValueError(f"{path}: unknown file type; expected one of "
                     f"{', '.join(_CSV_SUFFIXES + _LINE_SUFFIXES)}")


class LoadedSmiles(NamedTuple):
    """Raw SMILES of a source, and a one-line description of where they came from."""

    smiles: list[str]
    description: str


def load_source(data: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None,
                download: bool = True, timeout: float = 10.0) -> LoadedSmiles:
    """Read the raw SMILES of a named source or file.

    ``data`` is ``"tox21"``, ``"druglike"``, ``"moses"`` (the MOSES training split,
    see :mod:`minitransformer.chem.moses`), or the path of a SMILES file (see
    :func:`read_smiles`). ``None`` means Tox21 when it can be found or
    downloaded, and otherwise prints one line saying why and uses the
    drug-like set. ``data_dir``, ``download`` and ``timeout`` are passed to
    :func:`find_tox21` (or :func:`~minitransformer.chem.moses.find_moses`).
    """
    if data is None:
        try:
            return load_source("tox21", data_dir=data_dir, download=download, timeout=timeout)
        except (OSError, DownloadError, ChecksumError) as exc:  # OSError: not found, unwritable cache
            reason = str(exc).splitlines()[0]
            print(f"minitransformer: Tox21 unavailable ({reason}); using RDKit's drug-like set instead.")
            return load_source("druglike")
    if isinstance(data, str) and data.lower() == "tox21":
        path = find_tox21(data_dir, download=download, timeout=timeout)
        return LoadedSmiles(read_smiles(path), f"Tox21 (MoleculeNet), {path}")
    if isinstance(data, str) and data.lower() == "moses":
        from minitransformer.chem.moses import find_moses, read_moses_file
        path = find_moses("train", data_dir=data_dir, download=download, timeout=timeout)
        return LoadedSmiles(read_moses_file(path), f"MOSES train split, {path}")
    if isinstance(data, str) and data.lower() == "druglike":
        path = druglike_path()
        return LoadedSmiles(read_smiles(path, header=False),
                            f"drug-like WEHI set bundled with RDKit, {path}")
    path = Path(data)
    smiles = read_smiles(path)
    if not smiles:
        raise ValueError(f"{path} holds no SMILES (the file is empty, or has only a header, blank lines "
                         "or comments); give a file with one molecule per line or a smiles column")
    return LoadedSmiles(smiles, f"file {path}")


# --------------------------------------------------------------------------- cleaning
@dataclass
class CleanReport:
    """How many SMILES :func:`clean_smiles` saw, kept, and dropped for each reason."""

    total: int = 0
    kept: int = 0
    empty: int = 0
    too_short: int = 0
    too_long: int = 0
    invalid: int = 0
    limits: tuple = (None, None)

    def summary(self) -> str:
        """One line, e.g. ``kept 7239 of 7831 SMILES (dropped: empty 0, shorter than 10: 355, ...)``."""
        lo, hi = self.limits
        dropped = [f"empty {self.empty}"]
        if lo is not None:
            dropped.append(f"shorter than {lo}: {self.too_short}")
        if hi is not None:
            dropped.append(f"longer than {hi}: {self.too_long}")
        dropped.append(f"not parsed by RDKit: {self.invalid}")
        return f"kept {self.kept} of {self.total} SMILES (dropped: {', '.join(dropped)})"


def clean_smiles(smiles: Sequence[str], min_len: int | None = 10, max_len: int | None = 100,
                 check_rdkit: bool = True) -> tuple[list[str], CleanReport]:
    """Keep the SMILES that are non-empty, ``min_len <= len <= max_len`` characters, and parse.

    The checks run in that order and each string is counted under the first
    reason that rejects it, so the counts add up to ``total - kept``. Length
    is measured in characters of the string (not tokens); ``None`` disables a
    bound. ``check_rdkit=False`` skips parsing (no RDKit needed). Strings are
    stripped of surrounding white space; order is preserved. Raises
    ValueError if nothing is left. :func:`clean_indices` gives the positions
    of the kept strings instead (to keep labels aligned with them).
    """
    index, report = clean_indices(smiles, min_len, max_len, check_rdkit)
    return [smiles[i].strip() for i in index], report


def clean_indices(smiles: Sequence[str], min_len: int | None = 10, max_len: int | None = 100,
                  check_rdkit: bool = True) -> tuple[list[int], CleanReport]:
    """The rules of :func:`clean_smiles`; returns the indices of the kept strings."""
    report = CleanReport(total=len(smiles), limits=(min_len, max_len))
    kept = []
    context = quiet_rdkit() if check_rdkit else contextlib.nullcontext()
    with context:
        for i, s in enumerate(smiles):
            s = s.strip() if isinstance(s, str) else ""
            if not s:
                report.empty += 1
            elif min_len is not None and len(s) < min_len:
                report.too_short += 1
            elif max_len is not None and len(s) > max_len:
                report.too_long += 1
            elif check_rdkit and mol_from_smiles(s) is None:
                report.invalid += 1
            else:
                kept.append(i)
    report.kept = len(kept)
    if not kept:
        raise ValueError(f"no usable SMILES left after cleaning: {report.summary()}")
    return kept, report


# --------------------------------------------------------------------------- splitting
def split_in_order(smiles: Sequence[str], n_train: int = 6600,
                   n_val: int = 400) -> tuple[list[str], list[str], list[str]]:
    """Split in file order: the first ``n_train``, the next ``n_val``, and the rest as test."""
    if n_train < 0 or n_val < 0 or n_train + n_val > len(smiles):
        raise ValueError(f"cannot take n_train={n_train} and n_val={n_val} "
                         f"from {len(smiles)} SMILES")
    smiles = list(smiles)
    return smiles[:n_train], smiles[n_train:n_train + n_val], smiles[n_train + n_val:]


def split_random(smiles: Sequence[str], fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
                 seed: int = 0) -> tuple[list[str], list[str], list[str]]:
    """Shuffle with ``numpy.random.default_rng(seed)`` and split by ``fractions``.

    Train and validation get ``floor(fraction * n)`` items, the test split gets
    the remainder. Within each split the items keep their original relative
    order, so the result depends only on which items went where.
    """
    fractions = tuple(float(f) for f in fractions)
    if len(fractions) != 3 or min(fractions) < 0 or abs(sum(fractions) - 1.0) > 1e-9:
        raise ValueError(f"fractions must be three non-negative numbers summing to 1, got {fractions}")
    n = len(smiles)
    order = np.random.default_rng(seed).permutation(n)
    n_train = int(fractions[0] * n)
    n_val = int(fractions[1] * n)
    parts = np.split(order, [n_train, n_train + n_val])
    return tuple([smiles[i] for i in np.sort(part)] for part in parts)


def min_split_size(fractions=(0.8, 0.1, 0.1), need_test: bool = False) -> int:
    """The fewest molecules :func:`split_random` needs to give a non-empty train and
    validation split (and test split when ``need_test``), for the error messages."""
    for n in range(1, 100_000):
        n_train, n_val = int(fractions[0] * n), int(fractions[1] * n)
        if n_train and n_val and (not need_test or n - n_train - n_val > 0):
            return n
    return 100_000


# --------------------------------------------------------------------------- one molecule
def canonical(smiles: str, isomeric: bool = True) -> str | None:
    """RDKit's canonical SMILES of ``smiles``, or None when it does not parse (or is empty).

    Two strings describe the same molecule exactly when their canonical forms
    are equal. ``isomeric=False`` drops stereochemistry and isotopes first.
    """
    Chem = require_rdkit()
    with quiet_rdkit():
        mol = mol_from_smiles(smiles)
    if mol is None:
        return None
    return Chem.MolToSmiles(mol, isomericSmiles=isomeric)


def kekule(smiles: str) -> str | None:
    """The canonical SMILES of ``smiles`` in Kekule form (explicit single and double
    bonds, no lowercase aromatic atoms), or None when it does not parse.

    Same molecule, different spelling: a language model trained on Kekule forms
    never has to produce an aromatic ring that RDKit cannot kekulize.
    """
    Chem = require_rdkit()
    with quiet_rdkit():
        mol = mol_from_smiles(smiles)
        if mol is None:
            return None
        try:
            Chem.Kekulize(mol, clearAromaticFlags=True)
        except Exception:  # RDKit raises a KekulizeException subclass
            return None
    return Chem.MolToSmiles(mol, kekuleSmiles=True)


def randomize_smiles(smiles: str, rng: np.random.Generator, kekule_form: bool = False) -> str:
    """A random valid SMILES of the same molecule, determined by ``rng``.

    RDKit writes a non-canonical SMILES by walking the molecular graph from
    atom 0 in atom-index order. Renumbering the atoms with a permutation drawn
    from ``rng`` therefore yields a different, equally valid string for the
    same molecule (the "SMILES enumeration" augmentation of Bjerrum, 2017).
    Drawing the permutation from a NumPy generator makes the result
    reproducible: the same generator state gives the same string, unlike
    ``MolToSmiles(doRandom=True)``, which uses RDKit's own global random state.
    With ``kekule_form`` the string is written in Kekule form (as :func:`kekule`
    writes canonical ones; a molecule that cannot be kekulized is written
    aromatic). Raises ValueError for a string RDKit cannot parse.
    """
    Chem = require_rdkit()
    with quiet_rdkit():
        mol = mol_from_smiles(smiles)
    if mol is None:
        raise ValueError(f"cannot randomize an invalid SMILES: {smiles!r}")
    order = rng.permutation(mol.GetNumAtoms())
    shuffled = Chem.RenumberAtoms(mol, [int(i) for i in order])
    if kekule_form:
        try:
            Chem.Kekulize(shuffled, clearAromaticFlags=True)
        except Exception:  # RDKit raises a KekulizeException subclass
            pass
    return Chem.MolToSmiles(shuffled, canonical=False)
