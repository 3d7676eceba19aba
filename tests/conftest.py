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
