"""The MOSES benchmark data: find it, verify it, fetch it once, read it fast.

MOSES (Polykovskiy et al. 2020, Front. Pharmacol. 11:565644; MIT licence) is a
split of ZINC Clean Leads into three files of canonical RDKit SMILES, one
molecule a line under the header ``SMILES``:

==================  ===========  ===============================================
split               molecules    use
==================  ===========  ===============================================
``train``           1,584,663    training (a slice of it serves as validation)
``test``              176,074    the test set (NLL, SNN, Frag, Scaf)
``test_scaffolds``    176,225    molecules whose scaffolds never occur in train
==================  ===========  ===============================================

Where the files come from
-------------------------
:func:`find_moses` looks for ``<split>.csv.gz`` in, in order:

1. the ``data_dir`` argument;
2. ``$MINITRANSFORMER_DATA/moses/``;
3. the user cache, ``cache_dir()/moses/`` (see :func:`~minitransformer.chem.datasets.download.cache_dir`).

When all three miss, the files are read out of the PyPI wheel
``molsets-0.3.1-py3-none-any.whl`` (a zip archive that holds them as
``moses/dataset/data/<split>.csv.gz``): a copy of the wheel placed in one of the
three folders is used as it is, otherwise (``download=True``) ``pip download
molsets==0.3.1 --no-deps`` fetches it by name and version into the cache (the
user's pip settings apply; no address is written here). Every member is extracted into the cache, together
with the two structural-alert tables of MOSES's "Filters" metric (``mcf.csv``
and ``wehi_pains.csv``, see :func:`moses_filter_files`) and the FCD statistics of
the two test sets (``test_stats.npz``, ``test_scaffolds_stats.npz``, see
:mod:`minitransformer.chem.judge.moses_stats`), and a downloaded wheel is deleted afterwards.

Verification
------------
Each file is pinned by the SHA-256 of its bytes (:data:`SHA256`, taken from
the wheel whose own SHA-256 is :data:`WHEEL_SHA256`). A file is hashed the
first time it is used; the result goes into a small JSON marker in the cache,
keyed by the file's path, size and modification time, so the 10 MB training
file is not hashed again on every run (a changed size or time hashes it again).
Downloads and extractions are written through :mod:`minitransformer.atomic`
and hashed while they are written: a wrong checksum, a dropped connection or
Ctrl-C leaves no file behind that a later run would trust.

Reading
-------
:func:`load_moses` reads a split into a list of strings in about half a second
(one gunzip, one ``split``). The token arrays of a split are built and cached
by :mod:`minitransformer.chem.datasets.moses_tokens`.
"""
from __future__ import annotations

import gzip
import json
import os
import tempfile
import zipfile
from pathlib import Path

from minitransformer.atomic import parse_json
from minitransformer.atomic import atomic_write, write_json
from minitransformer.chem.datasets.download import ChecksumError, DownloadError, cache_dir
from minitransformer.chem.datasets.download import hashing_copy as _hashing_copy
from minitransformer.chem.datasets.download import sha256_of_file as _sha256_of

__all__ = ["SPLITS", "SHA256", "WHEEL_NAME", "PACKAGE", "WHEEL_SHA256", "find_moses", "find_moses_file",
           "load_moses", "moses_filter_files", "is_moses_train", "molecules_sha256", "moses_places", "verify_file",
           "is_moses"]

SPLITS = ("train", "test", "test_scaffolds")
WHEEL_NAME = "molsets-0.3.1-py3-none-any.whl"
WHEEL_SHA256 = "7f4450e3ebecebe79c3a2a55950c93daddee071120daf64a163d03481e811d34"
#: What ``pip download`` asks for: the wheel by name and version (no address is written here).
PACKAGE = "molsets==0.3.1"
#: SHA-256 of each file, by name, and its path inside the wheel.
SHA256 = {
    "train.csv.gz": "786f0313aa6b9ba5514df685f885742a70ea8d86f1a4fa48115f7f80a634265c",
    "test.csv.gz": "f896fbf3764f88d94670b9959e5872c600c12152a18233823e820761b7a791b2",
    "test_scaffolds.csv.gz": "adffb2192c1bfe31ab0e13154d4af19a37dc18bdbf3cd7b4491e04405128adde",
    "mcf.csv": "f4a2bfacb4cb8877295eb2a4b4e61ec9770a26388f1331e5dc9c193d22dd5f89",
    "wehi_pains.csv": "d762e5420ec70f06d7e41d336cae6f67e2feb0eddf05c6171192a332726d296f",
    "test_stats.npz": "ded25073225a895d4ed17bf1d4223d27560e87ff4cb85786346ca1cc8efa03d3",
    "test_scaffolds_stats.npz": "7b7aba6c1474634a019bebf16f389d554cb9dd1021dfc8c1d1e54430a9f0e7f8",
}
MEMBERS = {
    "train.csv.gz": "moses/dataset/data/train.csv.gz",
    "test.csv.gz": "moses/dataset/data/test.csv.gz",
    "test_scaffolds.csv.gz": "moses/dataset/data/test_scaffolds.csv.gz",
    "mcf.csv": "moses/metrics/mcf.csv",
    "wehi_pains.csv": "moses/metrics/wehi_pains.csv",
    "test_stats.npz": "moses/dataset/data/test_stats.npz",
    "test_scaffolds_stats.npz": "moses/dataset/data/test_scaffolds_stats.npz",
}
_MARKER = "verified.json"
#: :func:`molecules_sha256` of MOSES's training molecules as read from ``train.csv.gz``. MOSES wrote them as
#: canonical RDKit SMILES and its novelty compares samples with these strings as they are (5 in 20,000
#: are written otherwise by today's RDKit), so :func:`is_moses_train` lets novelty skip canonicalizing
#: them again, minutes for 1.58 million molecules, and count as MOSES counts.
TRAIN_MOLECULES_SHA256 = "4301e7f6118839465012eb93510328681ef4b7b24642e8748c4ad40971f4a304"


def molecules_sha256(smiles) -> str:
    """SHA-256 of a list of SMILES, each followed by a newline, in order (0.15 s for 1.58 million)."""
    import hashlib
    digest = hashlib.sha256()
    for s in smiles:
        digest.update(s.encode() + b"\n")
    return digest.hexdigest()


def is_moses_train(smiles) -> bool:
    """Whether ``smiles`` are exactly MOSES's training molecules, in file order (see :data:`TRAIN_MOLECULES_SHA256`)."""
    return len(smiles) == 1_584_663 and molecules_sha256(smiles) == TRAIN_MOLECULES_SHA256


def is_moses(data) -> bool:
    """Whether a ``--data`` value names the MOSES set."""
    return isinstance(data, str) and data.strip().lower() == "moses"


def _cache() -> Path:
    return cache_dir() / "moses"


def moses_places(data_dir: str | os.PathLike | None = None) -> list[Path]:
    """The folders searched, in order: ``data_dir``, ``$MINITRANSFORMER_DATA/moses``, the cache."""
    places = [Path(data_dir)] if data_dir is not None else []
    if os.environ.get("MINITRANSFORMER_DATA"):
        places.append(Path(os.environ["MINITRANSFORMER_DATA"]) / "moses")
    return places + [_cache()]


def _where(data_dir) -> str:
    """The searched folders, as the end of a sentence saying where to put the files."""
    places = [f"in {data_dir} (the data folder given)"] if data_dir is not None else []
    env = os.environ.get("MINITRANSFORMER_DATA")
    places.append(f"in {Path(env) / 'moses'} ($MINITRANSFORMER_DATA/moses)" if env else
                  "in $MINITRANSFORMER_DATA/moses (the variable is not set now)")
    places.append(f"in {_cache()} (the user cache)")
    return ", or ".join(places)


# --------------------------------------------------------------------------- verification
def _marker_key(path: Path) -> tuple[str, dict]:
    stat = path.stat()
    return str(path.resolve()), {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _read_marker() -> dict:
    try:
        return parse_json((_cache() / _MARKER).read_text())
    except (OSError, ValueError):
        return {}


def verify_file(path: str | os.PathLike, sha256: str | None = None) -> Path:
    """Check ``path`` against its pinned SHA-256 (by default ``SHA256[path.name]``).

    A file already verified at the same size and modification time is trusted
    without hashing again (the marker ``verified.json`` in the cache records it).
    Raises :class:`ChecksumError` on a mismatch, naming the file and the fix.
    """
    path = Path(path)
    want = sha256 or SHA256[path.name]
    key, stamp = _marker_key(path)
    marker = _read_marker()
    if marker.get(key) == dict(stamp, sha256=want):
        return path
    got = _sha256_of(path)
    if got != want:
        raise ChecksumError(f"checksum mismatch for {path}: sha256 {got}, expected {want}; the file is damaged "
                            "or another version: delete it and run again")
    marker[key] = dict(stamp, sha256=want)
    try:
        write_json(_cache() / _MARKER, marker)
    except OSError:  # a read-only cache only costs a hash next time
        pass
    return path


# --------------------------------------------------------------------------- the wheel
def _download_wheel(folder: Path, data_dir, timeout: float) -> Path:
    """``pip download`` the wheel into ``folder``, verified; :class:`DownloadError` when it cannot be had."""
    from minitransformer.chem.datasets import download
    try:
        wheel = download.pip_download(PACKAGE, WHEEL_NAME, folder, timeout)
    except OSError as exc:
        raise DownloadError(f"could not download the MOSES data ({exc}); offline? Run `pip download {PACKAGE} "
                            f"--no-deps` where there is a network and put {WHEEL_NAME} (sha256 "
                            f"{WHEEL_SHA256[:12]}...), or its files train.csv.gz, test.csv.gz and "
                            f"test_scaffolds.csv.gz, {_where(data_dir)}") from None
    return verify_file(wheel, WHEEL_SHA256)


def _extract(wheel: Path) -> None:
    """Write every member of :data:`MEMBERS` from ``wheel`` into the cache, each verified."""
    with zipfile.ZipFile(wheel) as archive:
        for name, member in MEMBERS.items():
            dest = _cache() / name
            if dest.is_file():
                continue
            with archive.open(member) as source:
                atomic_write(dest, _hashing_copy(source, SHA256[name], f"{member} in {wheel}"))


def _wheel_files(data_dir, download: bool, timeout: float) -> None:
    """Fill the cache from a wheel found in the searched folders, else from a downloaded one."""
    for place in moses_places(data_dir):
        if (place / WHEEL_NAME).is_file():
            _extract(verify_file(place / WHEEL_NAME, WHEEL_SHA256))
            return
    if not download:
        raise FileNotFoundError(f"the MOSES files are not there; put train.csv.gz, test.csv.gz and "
                                f"test_scaffolds.csv.gz (or the wheel {WHEEL_NAME}, from `pip download {PACKAGE} "
                                f"--no-deps`) {_where(data_dir)}, or allow the download")
    _cache().mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=_cache()) as folder:  # the 51 MB wheel goes after
        _extract(_download_wheel(Path(folder), data_dir, timeout))


def _find(name: str, data_dir, download: bool, timeout: float) -> Path:
    for place in moses_places(data_dir):
        if (place / name).is_file():
            return verify_file(place / name)
    _wheel_files(data_dir, download, timeout)
    return verify_file(_cache() / name)


def find_moses(split: str = "train", data_dir: str | os.PathLike | None = None, download: bool = True,
               timeout: float = 30.0) -> Path:
    """The verified path of ``<split>.csv.gz`` (``split`` one of :data:`SPLITS`).

    Searches ``data_dir``, ``$MINITRANSFORMER_DATA/moses`` and the cache; else
    reads the wheel (found there, or downloaded when ``download=True``) into the
    cache. Offline without the files: :class:`DownloadError` (or, with
    ``download=False``, FileNotFoundError) in one line naming the folders and
    the wheel's address. A damaged file raises :class:`ChecksumError`.
    """
    if split not in SPLITS:
        raise ValueError(f"unknown MOSES split {split!r}; choose one of {', '.join(SPLITS)}")
    return _find(f"{split}.csv.gz", data_dir, download, timeout)


def find_moses_file(name: str, data_dir: str | os.PathLike | None = None, download: bool = True,
                    timeout: float = 30.0) -> Path:
    """The verified path of any file of :data:`SHA256` (a split, an alert table, the FCD statistics of a
    test set), found and fetched like :func:`find_moses`'s."""
    if name not in SHA256:
        raise ValueError(f"unknown MOSES file {name!r}; choose one of {', '.join(SHA256)}")
    return _find(name, data_dir, download, timeout)


def moses_filter_files(download: bool = True, data_dir: str | os.PathLike | None = None,
                       timeout: float = 30.0) -> tuple[Path, Path]:
    """The verified paths of MOSES's structural-alert tables ``(mcf.csv, wehi_pains.csv)``.

    They are the two tables of MOSES's Filters metric, shipped in the same wheel
    (``moses/metrics/``); they are found and fetched like :func:`find_moses`'s files.
    """
    return (_find("mcf.csv", data_dir, download, timeout), _find("wehi_pains.csv", data_dir, download, timeout))


# --------------------------------------------------------------------------- reading
def read_moses_file(path: str | os.PathLike, limit: int | None = None) -> list[str]:
    """The SMILES of a MOSES ``.csv.gz`` (header ``SMILES``, one molecule a line), in file order.

    One gunzip and one ``str.split`` over the whole text: MOSES SMILES hold no
    white space or commas, so every field is a molecule. ``limit`` keeps the first.
    """
    path = Path(path)
    with gzip.open(path, "rb") as f:
        fields = f.read().decode("ascii").split()
    if not fields or fields[0] != "SMILES":
        raise ValueError(f"{path} is not a MOSES file (its first line should be SMILES)")
    return fields[1:] if limit is None else fields[1:1 + limit]


def load_moses(split: str = "train", limit: int | None = None, data_dir: str | os.PathLike | None = None,
               download: bool = True) -> list[str]:
    """The SMILES of a MOSES split (found, verified, fetched by :func:`find_moses`).

    About 0.4 s for the 1,584,663 training molecules. ``limit`` keeps the first ``limit``.
    """
    return read_moses_file(find_moses(split, data_dir=data_dir, download=download), limit)


# --------------------------------------------------------------------------- in the training pipeline
#: Molecules of the training file held out as the validation split (the last ones of the file).
VAL_SIZE = 10_000
#: How many molecules :func:`spot_check` parses with RDKit.
SPOT_CHECK = 1_000


def spot_check(smiles: list[str], n: int = SPOT_CHECK, seed: int = 0) -> str:
    """Parse a seeded random sample of ``n`` molecules with RDKit; a log line saying so.

    MOSES is already cleaned (canonical RDKit SMILES, neutral, one fragment), so
    the training pipeline checks a sample instead of 1.58 million molecules
    (which would take minutes).
    """
    import numpy as np

    from minitransformer.chem._rdkit import mol_from_smiles, quiet_rdkit
    pick = np.random.default_rng(seed).choice(len(smiles), size=min(n, len(smiles)), replace=False)
    with quiet_rdkit():
        bad = sum(mol_from_smiles(smiles[i]) is None for i in pick)
    return (f"RDKit check: a random sample of {len(pick)} of {len(smiles)} MOSES molecules, {bad} not parsed "
            "(MOSES is cleaned RDKit SMILES, so the rest is not checked)")


def random_part(smiles: list[str], n: int | None, seed: int = 0) -> list[str]:
    """``n`` molecules of a MOSES file drawn at random (``seed``), in file order; all when ``n`` is
    None or not smaller.

    The files are ordered, train and test alike (the share of molecules with a
    chlorine falls from 13.5 % in the first tenth of ``train`` to 8.2 % in the last,
    and the first 2,000 training molecules have FCD 3.5 to the first 2,000 test
    molecules but 5.9 to the whole test set), so a part of a file is drawn at
    random, never cut from the top.
    """
    if n is None or n >= len(smiles):
        return list(smiles)
    import numpy as np
    pick = np.sort(np.random.default_rng([seed, 1811]).permutation(len(smiles))[:n])
    return [smiles[i] for i in pick]


def split_moses(train: list[str], val_size: int = VAL_SIZE) -> tuple[list, list]:
    """``(train, validation)`` from the cleaned training molecules: the last ``val_size`` of
    the file (a tenth of them when there are fewer than ``10 * val_size``) are held out."""
    n_val = min(val_size, max(1, len(train) // 10))
    return train[:len(train) - n_val], train[len(train) - n_val:]
