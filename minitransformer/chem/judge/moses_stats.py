"""The reference statistics MOSES ships for its two test sets, read without running its code.

FCD/Test, SNN/Test, Frag/Test and Scaf/Test (and the same for TestSF) compare
samples with MOSES's ``test`` (176,074 molecules) and ``test_scaffolds``
(176,225) sets: ChemNet's mean and covariance over them, and their Morgan
fingerprints, BRICS-fragment and scaffold counts and molecular weights. Computing these takes about
four minutes of ChemNet and two of RDKit a set on two cores. MOSES ships them in
its wheel (``moses/dataset/data/test_stats.npz`` and
``test_scaffolds_stats.npz``), and MOSES's own ``get_all_metrics`` uses them. Ours
agree: the FCD between the shipped and our computed ChemNet statistics is 6e-7,
our fingerprints, fragment and scaffold counts differ from the shipped ones for
6 of the 176,074 test molecules (written otherwise by today's RDKit: a cosine of
1 - 2e-10 for Frag), and our molecular weights equal theirs. So :func:`seed_caches` writes the shipped statistics into
the caches of :func:`~minitransformer.chem.frechet.fcd.reference_statistics` and
:func:`~minitransformer.chem.judge.fragments.reference_features` when the molecules are
exactly one of those sets (:data:`SHIPPED`, keyed by
:func:`~minitransformer.chem.datasets.moses.molecules_sha256`), and those numbers are then
MOSES's. :func:`~minitransformer.chem.judge.moses_report.moses_references`, which every
MOSES judgement takes its test sets from, calls it.

Each file is pinned by its SHA-256 (:data:`minitransformer.chem.datasets.moses.SHA256`)
and found or fetched with the MOSES data (:func:`~minitransformer.chem.datasets.moses.find_moses_file`'s
folders, else the wheel). It is an ``.npz`` holding one NumPy object array, a
pickled dict. Unpickling runs whatever a pickle names, so :class:`_StatsUnpickler`
rebuilds only arrays, dtypes, latin-1 byte strings and ``Counter`` tables, and
refuses any other name; the checksum is checked before the unpickler sees a byte.
"""
from __future__ import annotations

import codecs
import collections
import io
import pickle
import zipfile

import numpy as np

__all__ = ["SHIPPED", "seed_caches", "read_shipped"]

#: :func:`~minitransformer.chem.datasets.moses.molecules_sha256` of MOSES's two test sets, as read from their
#: files -> (the file of their statistics, the number of molecules).
SHIPPED = {
    "d6290e7bc2f0881a8f50ffd53937d2207657de32fcc43786125eb6f73997c1e2": ("test_stats.npz", 176_074),
    "c7287a76a5c72e52234633bd96e1eebbd39a936f3fa98dd6236472c1fa7f9573": ("test_scaffolds_stats.npz", 176_225),
}


def _latin1(text, encoding="latin1"):
    """``_codecs.encode`` as protocol-2 pickles use it for bytes: ``str`` in latin-1, nothing else."""
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError("refused _codecs.encode of anything but a str in latin-1")
    return codecs.encode(text, "latin1")


def _reconstruct(cls, shape, dtype_code):
    """NumPy's pickle entry point for an array: an empty array of the class, filled by ``__setstate__``."""
    if cls is not np.ndarray:
        raise pickle.UnpicklingError(f"refused to rebuild a {cls!r}: only plain arrays")
    return np.ndarray.__new__(np.ndarray, shape, np.dtype(dtype_code) if isinstance(dtype_code, str) else dtype_code)


class _StatsUnpickler(pickle.Unpickler):
    """Rebuilds NumPy arrays, dtypes, latin-1 bytes and Counters; every other global is refused."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"): _reconstruct,  # (NumPy 1 wrote it so, NumPy 2 so:)
               ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
               ("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype,
               ("_codecs", "encode"): _latin1, ("collections", "Counter"): collections.Counter}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refused to load the global {module}.{name}: the MOSES statistics "
                                         "hold arrays and counts only")
        return self.ALLOWED[(module, name)]


def read_shipped(path, n: int) -> tuple:
    """``(mu (512,), sigma (512, 512), fps (n, 1024) uint8, fragments, scaffolds, weights (n,))`` of a MOSES
    ``*_stats.npz`` of ``n`` molecules (already checksum-verified), read through
    :class:`_StatsUnpickler`; ValueError naming the file for anything else."""
    from numpy.lib import format as npy
    try:
        with zipfile.ZipFile(path) as archive, archive.open("stats.npy") as f:
            version = npy.read_magic(f)
            header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            _, _, dtype = header(f)
            if dtype != np.dtype(object):
                raise ValueError(f"its array is {dtype}, not the pickled statistics")
            stats = _StatsUnpickler(io.BufferedReader(f)).load()
        stats = stats.item() if isinstance(stats, np.ndarray) else stats
        mu = np.asarray(stats["FCD"]["mu"], dtype=np.float64)
        sigma = np.asarray(stats["FCD"]["sigma"], dtype=np.float64)
        fps = np.asarray(stats["SNN"]["fps"])
        fragments, scaffolds = stats["Frag"]["frag"], stats["Scaf"]["scaf"]
        weights = np.asarray(stats["weight"]["values"], dtype=np.float64)
    except (OSError, KeyError, TypeError, AttributeError, IndexError, EOFError, zipfile.BadZipFile,
            pickle.UnpicklingError, ValueError) as exc:
        raise ValueError(f"{path} is not MOSES's statistics of a test set ({type(exc).__name__}: {exc})") from None
    if mu.shape != (512,) or sigma.shape != (512, 512) or not (np.isfinite(mu).all() and np.isfinite(sigma).all()):
        raise ValueError(f"{path}: its FCD statistics have shapes {mu.shape}, {sigma.shape}, not (512,), (512, 512)")
    if fps.shape != (n, 1024) or fps.dtype != np.uint8 or fps.max(initial=0) > 1:
        raise ValueError(f"{path}: its fingerprints are {fps.dtype} {fps.shape}, not 0/1 bytes ({n}, 1024)")
    if weights.shape != (n,) or not (np.isfinite(weights).all() and (weights > 0).all()):
        raise ValueError(f"{path}: its molecular weights are not {n} positive numbers")
    for counts in (fragments, scaffolds):
        if not isinstance(counts, dict) or not all(isinstance(k, str) and isinstance(v, int) and v > 0
                                                   for k, v in counts.items()):
            raise ValueError(f"{path}: its fragment or scaffold counts are not SMILES -> counts")
    return mu, sigma, fps, collections.Counter(fragments), collections.Counter(scaffolds), weights


def seed_caches(smiles, download: bool = True) -> bool:
    """When ``smiles`` are exactly one of MOSES's test sets (:data:`SHIPPED`), write the statistics
    MOSES ships for them into the FCD cache and the reference-features cache and return True; else
    (another set, or the file cannot be had: the reason on standard error) False, and the caller
    computes them."""
    import sys

    from minitransformer.chem.datasets.download import ChecksumError, DownloadError
    from minitransformer.chem.frechet.fcd import FCDStatistics, cached_statistics, write_cached
    from minitransformer.chem.frechet.fcd import cache_path as fcd_cache_path
    from minitransformer.chem.judge.fragments import ReferenceFeatures
    from minitransformer.chem.judge.fragments import cache_path as features_cache_path
    from minitransformer.chem.datasets.moses import find_moses_file, molecules_sha256
    sizes = {n for _, n in SHIPPED.values()}
    if len(smiles) not in sizes:  # (no hash for every other set)
        return False
    found = SHIPPED.get(molecules_sha256(smiles))
    if found is None:
        return False
    name, n = found
    caches = (fcd_cache_path(smiles), features_cache_path(tuple(smiles)))
    if cached_statistics(smiles) is not None and ReferenceFeatures.cached(tuple(smiles)) is not None:
        return True  # seeded before, and both files whole
    try:
        mu, sigma, fps, fragments, scaffolds, weights = read_shipped(find_moses_file(name, download=download), n)
    except (DownloadError, ChecksumError, FileNotFoundError, ValueError) as exc:
        print(f"MOSES's shipped statistics {name} cannot be had ({' '.join(str(exc).split())}); computing "
              "them instead (once, then cached)", file=sys.stderr)
        return False
    try:
        write_cached(caches[0], FCDStatistics(mu=mu, sigma=sigma, n=n), smiles)
        ReferenceFeatures(n, fps.astype(np.float32), fragments, scaffolds, weights).save(caches[1],
                                                                                        tuple(smiles))
    except OSError as exc:
        print(f"MOSES's shipped statistics {name} could not be cached ({exc}); computing them instead",
              file=sys.stderr)
        return False
    return True
