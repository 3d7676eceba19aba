"""Fixtures of the fast-kernel tests."""
from __future__ import annotations

import pytest

from minitransformer import backend
from minitransformer.fast.engine import compiled, cuda, cuda_flat

# The kernels with compiled (Numba) loops run both ways: compiled, and the NumPy
# fast kernels that run without Numba. (On the strict stand-in the NumPy ones run.)
COMPILED_MODES = [pytest.param(True, id="numba", marks=pytest.mark.skipif(
    not compiled.AVAILABLE, reason="Numba is not installed (pip install minitransformer[fast])")),
    pytest.param(False, id="numpy")]


@pytest.fixture(params=COMPILED_MODES)
def compiled_mode(request):
    """Turn the compiled loops on (``numba``) or off (``numpy``) for one test; on, they
    take arrays of every size (not only from compiled.MIN_SIZE), so small test inputs
    run through them too."""
    saved = compiled.enabled(), compiled.MIN_SIZE
    compiled.set_enabled(request.param)
    compiled.MIN_SIZE = 0
    try:
        yield request.param
    finally:
        compiled.set_enabled(saved[0])
        compiled.MIN_SIZE = saved[1]


@pytest.fixture
def on_gpu():
    """CuPy for one test (the tests marked ``gpu``; ``tests/conftest.py`` skips them without one)."""
    backend.use("cupy")
    yield
    backend.use("numpy")


@pytest.fixture
def launches(monkeypatch):
    """Counts the fused CUDA kernels launched (fast/engine/cuda.py, fast/engine/cuda_flat.py), by name:
    proves the fast twins took them."""
    counts = {}
    for module in (cuda, cuda_flat):
        def counting(name, dtype, get=module._kernel):
            kernel = get(name, dtype)
            counts[name] = counts.get(name, 0) + 1
            return kernel

        monkeypatch.setattr(module, "_kernel", counting)
    return counts
