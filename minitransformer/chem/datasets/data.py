"""SMILES data: where it comes from, reading it, cleaning it, splitting it.

The pipeline a training script runs, in order:

1. :func:`load_source` picks a data set and reads its raw SMILES strings with
   :func:`read_smiles`. Built-in sources are ``"tox21"`` (the MoleculeNet
   Tox21 table, located or downloaded by :func:`find_tox21`) and
   ``"druglike"`` (10,000 drug-like SMILES from the WEHI screening library that
   ship inside RDKit, so they need no network; see :func:`druglike_path`) and
   ``"moses"`` (the 1.58M training molecules of the MOSES benchmark, see
   :mod:`minitransformer.chem.datasets.moses`) and ``"recombined"`` (300,000 heavier
   drug-like molecules, 400-550 Da, made from MOSES molecules, see
   :mod:`minitransformer.chem.datasets.recombined`).
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

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

import numpy as np

from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit, require_rdkit
from minitransformer.chem.datasets.download import ChecksumError, DownloadError, find_tox21
from minitransformer.chem.datasets.smiles_files import read_smiles_file

__all__ = [
    "find_tox21", "druglike_path", "read_smiles", "load_source", "LoadedSmiles",
    "clean_smiles", "clean_indices", "CleanReport", "split_in_order", "split_random",
    "randomize_smiles", "canonical",
]


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


def read_smiles(path: str | os.PathLike, column: str | int | None = None,
                header: bool = True) -> list[str]:
    """The SMILES strings of a data file, in file order: the one reader,
    :func:`~minitransformer.chem.datasets.smiles_files.read_smiles_file`, with a data set's policy (blank
    lines and ``#`` comments of a ``.smi`` file are no molecules). ``.csv``: the SMILES
    column is ``column`` (a name or 0-based index) or found by name; ``header=False`` for a
    CSV without a header row. A missing file, a folder, a damaged ``.gz`` or text that is
    not UTF-8 raises an error naming the file."""
    return read_smiles_file(path, every_line=False, column=column, header=header).smiles


class LoadedSmiles(NamedTuple):
    """Raw SMILES of a source, and a one-line description of where they came from."""

    smiles: list[str]
    description: str


def load_source(data: str | os.PathLike | None = None, data_dir: str | os.PathLike | None = None,
                download: bool = True, timeout: float = 10.0, limit: int | None = None) -> LoadedSmiles:
    """Read the raw SMILES of a named source or file.

    ``data`` is ``"tox21"``, ``"druglike"``, ``"moses"`` (the MOSES training split,
    see :mod:`minitransformer.chem.datasets.moses`), ``"recombined"`` (made once from
    MOSES, :mod:`minitransformer.chem.datasets.recombined`), or the path of a SMILES file (see
    :func:`read_smiles`). ``None`` means Tox21 when it can be found or
    downloaded, and otherwise prints one line saying why and uses the
    drug-like set. ``data_dir``, ``download`` and ``timeout`` are passed to
    :func:`find_tox21` (or :func:`~minitransformer.chem.datasets.moses.find_moses`). ``limit``
    (a quick run's molecules): the recombined set is made only that large (a cache of its own),
    instead of 300,000 molecules in half an hour.
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
        from minitransformer.chem.datasets.moses import find_moses, read_moses_file
        path = find_moses("train", data_dir=data_dir, download=download, timeout=timeout)
        return LoadedSmiles(read_moses_file(path), f"MOSES train split, {path}")
    if isinstance(data, str) and data.lower() == "recombined":
        from minitransformer.chem.datasets.recombined import RecombineSettings, recombined_moses
        settings = RecombineSettings() if limit is None else RecombineSettings(n=limit, sources=max(2, 20 * limit))
        smiles, path = recombined_moses(settings, data_dir=data_dir, download=download, timeout=timeout)
        return LoadedSmiles(smiles, f"MOSES molecules joined at BRICS bonds, 400-550 Da, {path}")
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
    #: SMILES after the last one needed, left unread (``stop_after``); not counted in ``total``.
    unread: int = 0

    def summary(self) -> str:
        """One line, e.g. ``kept 7239 of 7831 SMILES (dropped: empty 0, shorter than 10: 355, ...)``."""
        lo, hi = self.limits
        dropped = [f"empty {self.empty}"]
        if lo is not None:
            dropped.append(f"shorter than {lo}: {self.too_short}")
        if hi is not None:
            dropped.append(f"longer than {hi}: {self.too_long}")
        dropped.append(f"not parsed by RDKit: {self.invalid}")
        first = f"the first {self.total} of {self.total + self.unread}" if self.unread else f"{self.total}"
        return f"kept {self.kept} of {first} SMILES (dropped: {', '.join(dropped)})"


def clean_smiles(smiles: Sequence[str], min_len: int | None = 10, max_len: int | None = 100,
                 check_rdkit: bool = True, stop_after: int | None = None) -> tuple[list[str], CleanReport]:
    """Keep the SMILES that are non-empty, ``min_len <= len <= max_len`` characters, and parse.

    The checks run in that order and each string is counted under the first
    reason that rejects it, so the counts add up to ``total - kept``. Length
    is measured in characters of the string (not tokens); ``None`` disables a
    bound. ``check_rdkit=False`` skips parsing (no RDKit needed). Strings are
    stripped of surrounding white space; order is preserved. Raises
    ValueError if nothing is left. ``stop_after`` stops once that many are kept (the
    first ones, as without it; the rest are not read: a quick run parses no more than
    it uses). :func:`clean_indices` gives the positions of the kept strings instead (to
    keep labels aligned with them).
    """
    index, report = clean_indices(smiles, min_len, max_len, check_rdkit, stop_after)
    return [smiles[i].strip() for i in index], report


def clean_indices(smiles: Sequence[str], min_len: int | None = 10, max_len: int | None = 100,
                  check_rdkit: bool = True, stop_after: int | None = None) -> tuple[list[int], CleanReport]:
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
                if len(kept) == stop_after:
                    report.total, report.unread = i + 1, len(smiles) - i - 1
                    break
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
