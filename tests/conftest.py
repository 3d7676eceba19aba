"""Shared fixtures: run tests under several backends, skip GPU tests cleanly."""
import os

import pytest

from minitransformer import backend


@pytest.fixture(params=["numpy", "strict"])
def any_backend(request):
    """Run the test under NumPy and under the strict CPU stand-in for CuPy, which
    raises on implicit host conversion (so np.* mixed into device code fails here)."""
    backend.use(request.param)
    try:
        yield request.param
    finally:
        backend.use("numpy")


class _RankNotAllThere(Exception):
    """A gather of :func:`two_ranks` asked for before both ranks gave their share."""


class _OneOfTwoRanks:
    """Rank ``rank`` of two data-parallel ranks played in one process, one after the other:
    ``gather`` records this rank's share in ``shares`` and, once both are there, returns them
    (before that it raises, ending the first rank's call)."""

    def __init__(self, rank: int, shares: list):
        self.rank, self.size, self.shares = rank, 2, shares

    def gather(self, value):
        self.shares[self.rank] = value
        if None in self.shares:
            raise _RankNotAllThere
        return self.shares


@pytest.fixture
def two_ranks():
    """``run(fn)``: ``fn(share)`` as rank 1 (its call stops at its gather), then as rank 0, whose
    result is returned with both ranks' shares: what two ranks sharing the work give."""
    def run(fn):
        shares = [None, None]
        with pytest.raises(_RankNotAllThere):
            fn(_OneOfTwoRanks(1, shares))
        return fn(_OneOfTwoRanks(0, shares)), shares
    return run


@pytest.fixture
def float64():
    """Build parameters and activations in float64 (for gradient checks)."""
    with backend.dtype_scope("float64"):
        yield


def _cupy_usable() -> bool:
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if _cupy_usable():
        return
    skip = pytest.mark.skip(reason="needs CuPy and a GPU (none found)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_backend():
    """Every test starts and ends on the backend chosen by the environment."""
    start = os.environ.get("MINITRANSFORMER_BACKEND", "numpy").strip().lower() or "numpy"
    backend.use(start)
    yield
    backend.use(start)


@pytest.fixture(scope="session")
def chemnet():
    """ChemNet with the published weights: found in $MINITRANSFORMER_DATA or the user cache,
    else fetched once (5.6 MB, checksum-verified) as the library does on first use; the
    tests that need it are skipped, saying why, on a machine that can do neither."""
    from minitransformer.chem.frechet.chemnet import ChemNet
    from minitransformer.chem.frechet.chemnet_weights import load_chemnet_weights
    from minitransformer.chem.datasets.download import DownloadError
    try:
        return ChemNet(load_chemnet_weights(download=True))
    except DownloadError as exc:
        pytest.skip(f"ChemNet's weights are not here and cannot be fetched: {exc}")
