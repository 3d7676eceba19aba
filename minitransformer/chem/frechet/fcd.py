r"""The Fréchet ChemNet Distance (FCD) between two sets of molecules.

Preuer et al. (2018, "Fréchet ChemNet Distance: a metric for generative models
for molecules in drug discovery", J. Chem. Inf. Model. 58, 1736) describe each
molecule by the 512 activations of ChemNet's last hidden layer
(:mod:`minitransformer.chem.frechet.chemnet`), fit a Gaussian to each set (its mean
:math:`\mu` and covariance :math:`\Sigma`) and report the Fréchet distance of
the two Gaussians, in its squared form, as MOSES and GuacaMol print it:

.. math:: \mathrm{FCD} = \lVert \mu_1 - \mu_2 \rVert^2
          + \mathrm{tr}\,\Sigma_1 + \mathrm{tr}\,\Sigma_2
          - 2\,\mathrm{tr}\big( (\Sigma_1 \Sigma_2)^{1/2} \big).

0 means the two sets look alike to ChemNet; MOSES's own training set scores
0.008 against its test set, its best published generator 0.073.

Which molecules. As in MOSES, only valid molecules take part: each string is
parsed by RDKit and written as its canonical SMILES (the form ChemNet reads);
invalid samples are left out (validity reports them). ``Σ`` is the unbiased
sample covariance (divided by :math:`n - 1`); it needs two molecules.

The trace of the matrix square root. :math:`\Sigma_1\Sigma_2` is not
symmetric, but it is similar to the symmetric positive semi-definite
:math:`S = \Sigma_1^{1/2}\Sigma_2\Sigma_1^{1/2}`, so both have the same
eigenvalues :math:`\lambda_i \ge 0` and
:math:`\mathrm{tr}((\Sigma_1\Sigma_2)^{1/2}) = \sum_i \sqrt{\lambda_i}`.
:func:`frechet_distance` computes it that way, with two symmetric eigenvalue
problems; the reference code calls a general matrix square root
(``scipy.linalg.sqrtm``), which gives the same number for well-conditioned
covariances and is less exact when a set has fewer molecules than 512 (then
:math:`\Sigma` is singular).

The FCD falls as the sets grow (each covariance is estimated better), so it
only compares sets of the same sizes against the same reference. Hence the
**floor** that every report prints beside it: the FCD of as many real
molecules, not in the reference, as the samples have valid ones (those the FCD
reads), against the same reference (:meth:`FCDJudge.floor`).

Reference statistics (MOSES's 176,074 test molecules take a few minutes) are
computed once and kept in the user cache, keyed by the SHA-256 of the
molecules and of ChemNet's weights (:func:`reference_statistics`); for MOSES's
two test sets the cache is filled with the statistics MOSES ships
(:mod:`minitransformer.chem.judge.moses_stats`), checksum-verified, not computed.
"""
from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from minitransformer.chem._rdkit import parse_valid

__all__ = ["FCDStatistics", "chemnet_activations", "fcd_statistics", "frechet_distance", "fcd",
           "reference_statistics", "default_chemnet", "FCDJudge", "fcd_judge_or_note"]

_NETS: dict = {}


def default_chemnet(download: bool = True):
    """The :class:`~minitransformer.chem.frechet.chemnet.ChemNet` with the published weights, built once."""
    if "net" not in _NETS:
        from minitransformer.chem.frechet.chemnet import ChemNet
        from minitransformer.chem.frechet.chemnet_weights import load_chemnet_weights
        _NETS["net"] = ChemNet(load_chemnet_weights(download=download))
    return _NETS["net"]


@dataclass(frozen=True)
class FCDStatistics:
    """A set's Gaussian in ChemNet's space: mu (512,) and sigma (512, 512), float64, from n molecules."""
    mu: np.ndarray
    sigma: np.ndarray
    n: int


def chemnet_activations(smiles: Sequence[str], net=None, progress: str | None = None) -> np.ndarray:
    """ChemNet's activations of the valid molecules among ``smiles``, in order: (n_valid, 512)
    float32. Invalid and empty strings are skipped. ``progress``: a label for the progress
    shown on standard error (:func:`minitransformer.chem.progress.progress`: a bar on a
    terminal, else lines with the time left; None: nothing)."""
    canonical = parse_valid(smiles)[1]
    net = net if net is not None else default_chemnet()
    if progress is None:
        return net.activations(canonical)
    from minitransformer.chem.progress import progress as reporter
    with reporter(progress, len(canonical)) as update:
        return net.activations(canonical, progress=update)


def fcd_statistics(smiles: Sequence[str], net=None, progress: str | None = None) -> FCDStatistics:
    """The mean and covariance of ChemNet's activations over the valid ``smiles``.
    Raises ValueError with fewer than two valid molecules."""
    return statistics_of(chemnet_activations(smiles, net, progress))


def statistics_of(activations: np.ndarray) -> FCDStatistics:
    """The mean (512,) and unbiased covariance (512, 512), in float64, of ChemNet activations
    (n, 512). Raises ValueError with fewer than two rows."""
    acts = np.asarray(activations, dtype=np.float64)  # (n, 512)
    if len(acts) < 2:
        raise ValueError(f"FCD needs at least two valid molecules, got {len(acts)}")
    return FCDStatistics(mu=acts.mean(axis=0), sigma=np.cov(acts, rowvar=False), n=len(acts))


def _psd_sqrt(sigma: np.ndarray) -> np.ndarray:
    """The symmetric square root of a positive semi-definite matrix (round-off negatives set to 0)."""
    w, V = np.linalg.eigh(sigma)  # (d,), (d, d)
    return (V * np.sqrt(np.clip(w, 0.0, None))) @ V.T  # (d, d)


def frechet_distance(a: FCDStatistics, b: FCDStatistics) -> float:
    """The squared Fréchet distance of the Gaussians ``a`` and ``b`` (module docstring); never below 0
    (a set against itself gives round-off of either sign, -0.0000 in a report otherwise)."""
    root = _psd_sqrt(a.sigma)  # (d, d)
    eig = np.linalg.eigvalsh(root @ b.sigma @ root)  # (d,), the eigenvalues of Sigma_a Sigma_b
    trace_sqrt = float(np.sum(np.sqrt(np.clip(eig, 0.0, None))))
    diff = a.mu - b.mu  # (d,)
    return max(float(diff @ diff + np.trace(a.sigma) + np.trace(b.sigma) - 2.0 * trace_sqrt), 0.0)


def fcd(samples: Sequence[str], reference: Sequence[str] | FCDStatistics, net=None) -> float | None:
    """FCD of the valid ``samples`` against ``reference`` (SMILES, or its statistics);
    None when fewer than two samples are valid."""
    ref = reference if isinstance(reference, FCDStatistics) else fcd_statistics(reference, net)
    try:
        return frechet_distance(fcd_statistics(samples, net), ref)
    except ValueError:
        return None


def _cache_key(smiles: Sequence[str]) -> str:
    from minitransformer.chem.frechet.chemnet import PAD_LEN
    from minitransformer.chem.frechet.chemnet_weights import WEIGHTS_SHA256
    digest = hashlib.sha256(f"chemnet {WEIGHTS_SHA256} pad {PAD_LEN}\n".encode())
    for s in smiles:
        digest.update(s.encode() + b"\n")
    return digest.hexdigest()


def cache_path(smiles: Sequence[str]):
    """Where :func:`reference_statistics` keeps the statistics of ``smiles``: ``cache_dir()/fcd/<key>.npz``."""
    from minitransformer.chem.datasets.download import cache_dir
    return cache_dir() / "fcd" / f"{_cache_key(smiles)}.npz"


#: The cache file's format. Beside the statistics it holds the key it was written for (the molecules
#: and ChemNet's weights) and the SHA-256 of its arrays, so a damaged, edited or foreign file under
#: the cache's name is never read as the statistics (they are computed again).
CACHE_FORMAT = "minitransformer-fcd-statistics-v2"


def _arrays_sha256(mu: np.ndarray, sigma: np.ndarray, n: int) -> str:
    """SHA-256 of the statistics: mu (512,), sigma (512, 512) as float64, and their count ``n``."""
    h = hashlib.sha256(f"{n}".encode())
    for a in (np.ascontiguousarray(mu, dtype=np.float64), np.ascontiguousarray(sigma, dtype=np.float64)):
        h.update(f"{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _read_cached(path, key: str) -> FCDStatistics | None:
    """The statistics cached at ``path`` for ``key``; None when there are none, or the file is not
    whole (another format, another key, arrays of the wrong shape, non-finite, or edited)."""
    try:
        with np.load(path, allow_pickle=False) as f:
            mu, sigma, n = np.asarray(f["mu"], np.float64), np.asarray(f["sigma"], np.float64), int(f["n"])
            fields = {name: bytes(f[name].tobytes()).decode() for name in ("format", "key", "sha256")}
    except (OSError, KeyError, ValueError, TypeError, EOFError, UnicodeDecodeError, zipfile.BadZipFile):
        return None
    whole = (fields["format"] == CACHE_FORMAT and fields["key"] == key and n >= 2 and mu.shape == (512,)
             and sigma.shape == (512, 512) and np.isfinite(mu).all() and np.isfinite(sigma).all()
             and fields["sha256"] == _arrays_sha256(mu, sigma, n))
    return FCDStatistics(mu=mu, sigma=sigma, n=n) if whole else None


def write_cached(path, stats: FCDStatistics, smiles: Sequence[str]) -> None:
    """Keep ``stats`` of ``smiles`` at ``path`` (:func:`cache_path`), atomically, with its format, key
    and checksum; OSError when it cannot be written."""
    from minitransformer.atomic import write_bytes
    text = lambda value: np.frombuffer(value.encode(), dtype=np.uint8)  # noqa: E731
    buffer = io.BytesIO()
    np.savez(buffer, mu=stats.mu, sigma=stats.sigma, n=np.array(stats.n), format=text(CACHE_FORMAT),
             key=text(_cache_key(smiles)), sha256=text(_arrays_sha256(stats.mu, stats.sigma, stats.n)))
    write_bytes(path, buffer.getvalue())


def cached_statistics(smiles: Sequence[str]) -> FCDStatistics | None:
    """The statistics of ``smiles`` the cache holds whole, or None."""
    return _read_cached(cache_path(smiles), _cache_key(smiles))


def reference_statistics(smiles: Sequence[str], name: str = "reference", net=None,
                         progress: bool = True) -> FCDStatistics:
    """:func:`fcd_statistics` of a reference set, computed once and then read from the user
    cache (``cache_dir()/fcd/<sha256>.npz``, the key covering the molecules in order and
    ChemNet's weights, so changed data is never served stale). ``name`` labels the
    progress bar."""
    path = cache_path(smiles)
    cached = _read_cached(path, _cache_key(smiles))
    if cached is not None:
        return cached
    stats = fcd_statistics(smiles, net, progress=f"ChemNet on {name} (once)" if progress else None)
    try:
        write_cached(path, stats, smiles)
    except OSError:  # a read-only cache only costs the computation next time
        pass
    return stats


class FCDJudge:
    """FCD of sample sets against fixed reference sets, each beside its floor.

    ``references`` maps a name (``"test"``, ``"heldout"`` ...) to the reference
    molecules, whose statistics come from :func:`reference_statistics` (cached);
    ``real`` are real molecules that are in no reference (None: no floor), put in one
    random order (``seed``) from which :meth:`floor` takes as many as a sample set has
    valid molecules. Calling the judge on samples gives ``{name: FCD or None}``. A
    reference may be given as its :class:`FCDStatistics`.
    """

    def __init__(self, references: dict, real: Sequence[str] | None, seed: int = 0, net=None,
                 progress: bool = True):
        self.net = net if net is not None else default_chemnet()
        self.references = {name: mols if isinstance(mols, FCDStatistics) else
                           reference_statistics(mols, name, self.net, progress) for name, mols in references.items()}
        self.real = None if real is None else list(real)
        self._order = None if real is None else np.random.default_rng(seed).permutation(len(self.real))  # (R,)
        self._activations = np.zeros((0, 512), dtype=np.float32)  # of real[_order[:_drawn]], the valid ones
        self._drawn = 0

    def floor(self, n: int) -> tuple[dict, int]:
        """``({name: FCD}, m)``: the FCD of the first ``n`` valid real molecules of the random order
        (m = n, or all of them when there are fewer) against each reference; ``({}, 0)`` without
        real molecules or with fewer than two. The floors of several sizes share their molecules,
        and ChemNet reads each molecule once."""
        if self.real is None:
            return {}, 0
        while len(self._activations) < n and self._drawn < len(self.real):  # read only what is not read yet
            take = self._order[self._drawn:self._drawn + n - len(self._activations)]
            more = chemnet_activations([self.real[i] for i in take], self.net,  # (<= len(take), 512)
                                       progress=f"ChemNet on {len(take):,} real molecules (the FCD floor)")
            self._activations, self._drawn = np.concatenate([self._activations, more]), self._drawn + len(take)
        if min(n, len(self._activations)) < 2:
            return {}, 0
        stats = statistics_of(self._activations[:n])  # of m = min(n, all valid) molecules
        return {name: frechet_distance(stats, ref) for name, ref in self.references.items()}, stats.n

    def __call__(self, samples: Sequence[str]) -> dict:
        try:
            stats = fcd_statistics(samples, self.net, progress=f"ChemNet on {len(samples):,} samples")
        except ValueError:  # fewer than two valid samples
            return {name: None for name in self.references}
        return {name: frechet_distance(stats, ref) for name, ref in self.references.items()}


def fcd_judge_or_note(references: dict, real: Sequence[str] | None, seed: int = 0,
                      download: bool = True) -> tuple[FCDJudge | None, str]:
    """An :class:`FCDJudge`, or ``(None, why not)`` in one line when ChemNet's weights cannot be
    had (offline, damaged) or a set is too small: the caller reports FCD as n/a with that reason."""
    from minitransformer.chem.datasets.download import ChecksumError, DownloadError
    from minitransformer.chem.frechet.torch_file import TorchFileError
    try:
        return FCDJudge(references, real, seed, net=default_chemnet(download=download)), ""
    except (DownloadError, FileNotFoundError, ChecksumError, TorchFileError, ValueError) as exc:
        return None, f"FCD not computed: {exc}"  # (ValueError: a set with fewer than two valid molecules)
