"""The FCD statistics MOSES ships for its two test sets, read without running its code.

FCD/Test and FCD/TestSF compare samples with ChemNet's mean and covariance over
MOSES's ``test`` (176,074 molecules) and ``test_scaffolds`` (176,225) sets.
Computing them takes ChemNet about four minutes a set on two cores; MOSES ships
them in its wheel (``moses/dataset/data/test_stats.npz`` and
``test_scaffolds_stats.npz``), computed with the same weights, and ours agree
with them to 6e-7 in FCD (``docs/fcd.md``). So
:func:`~minitransformer.chem.fcd.reference_statistics` takes them from here when
the molecules it is given are exactly one of those sets, with ChemNet's published
weights: :data:`SHIPPED` maps that cache key (the SHA-256 of the molecules, in
order, and of the weights) to the file.

Each file is pinned by its SHA-256 (:data:`minitransformer.chem.moses.SHA256`)
and found or fetched with the MOSES data (:func:`~minitransformer.chem.moses.find_moses`'s
folders, else the wheel). It is an ``.npz`` holding one NumPy object array, a
pickled dict (``{"FCD": {"mu", "sigma"}, "SNN": ..., "Frag": ..., "Scaf": ...}``).
Unpickling runs whatever a pickle names, so :class:`_StatsUnpickler` rebuilds only
arrays, dtypes, latin-1 byte strings and ``Counter`` tables, and refuses any other
name before the checksum would even let the file through. Only ``mu`` and
``sigma`` are kept, in the FCD cache, so the 190 MB pickle is read once.
"""
from __future__ import annotations

import codecs
import collections
import io
import pickle
import zipfile

import numpy as np

__all__ = ["SHIPPED", "shipped_statistics", "read_shipped_fcd"]

#: The FCD cache key (:func:`~minitransformer.chem.fcd._cache_key`) of MOSES's two test sets -> the file
#: that holds their statistics. A key covers the molecules in order and ChemNet's weights.
SHIPPED = {
    "dab8eefdcfc90b88f8f0b3739fe53d27599f2d24222e4a467c702348cedef129": ("test_stats.npz", 176_074),
    "fc8398cb897310d82a6c66cb5a627f69e01719919ee553ea4ef556e8fad3f03a": ("test_scaffolds_stats.npz", 176_225),
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


def read_shipped_fcd(path) -> tuple[np.ndarray, np.ndarray]:
    """``(mu (512,), sigma (512, 512))`` float64 of a MOSES ``*_stats.npz`` (already checksum-verified),
    through :class:`_StatsUnpickler`; ValueError for anything else."""
    from numpy.lib import format as npy
    try:
        with zipfile.ZipFile(path) as archive, archive.open("stats.npy") as f:
            version = npy.read_magic(f)
            header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            _, _, dtype = header(f)
            if dtype != np.dtype(object):
                raise ValueError(f"its array is {dtype}, not the pickled statistics")
            stats = _StatsUnpickler(io.BufferedReader(f)).load()
        fcd = stats.item()["FCD"] if isinstance(stats, np.ndarray) else stats["FCD"]
        mu, sigma = np.asarray(fcd["mu"], dtype=np.float64), np.asarray(fcd["sigma"], dtype=np.float64)
    except (OSError, KeyError, TypeError, AttributeError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError,
            ValueError) as exc:
        raise ValueError(f"{path} is not MOSES's FCD statistics ({type(exc).__name__}: {exc})") from None
    if mu.shape != (512,) or sigma.shape != (512, 512) or not (np.isfinite(mu).all() and np.isfinite(sigma).all()):
        raise ValueError(f"{path}: its FCD statistics have shapes {mu.shape}, {sigma.shape}, not (512,), (512, 512)")
    return mu, sigma


def shipped_statistics(key: str, download: bool = True):
    """The :class:`~minitransformer.chem.fcd.FCDStatistics` MOSES ships for the set whose cache key is
    ``key``; None when the key is not one of :data:`SHIPPED`, or (with the reason on standard error)
    when the file cannot be had: then the caller computes them."""
    import sys

    from minitransformer.chem.download import ChecksumError, DownloadError
    from minitransformer.chem.fcd import FCDStatistics
    from minitransformer.chem.moses import find_moses_file
    if key not in SHIPPED:
        return None
    name, n = SHIPPED[key]
    try:
        mu, sigma = read_shipped_fcd(find_moses_file(name, download=download))
    except (DownloadError, ChecksumError, FileNotFoundError, ValueError) as exc:
        print(f"MOSES's shipped statistics {name} cannot be had ({' '.join(str(exc).split())}); computing "
              "them with ChemNet instead (once, then cached)", file=sys.stderr)
        return None
    return FCDStatistics(mu=mu, sigma=sigma, n=n)
