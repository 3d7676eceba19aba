"""Fixtures of the fast-kernel tests."""
from __future__ import annotations

import pytest

from minitransformer.fast import compiled

# The kernels with compiled (Numba) loops run both ways: compiled, and the NumPy
# fast kernels that run without Numba. (On the strict stand-in the NumPy ones run.)
COMPILED_MODES = [pytest.param(True, id="numba", marks=pytest.mark.skipif(
    not compiled.AVAILABLE, reason="Numba is not installed (pip install minitransformer[fast])")),
    pytest.param(False, id="numpy")]


@pytest.fixture(params=COMPILED_MODES)
def compiled_mode(request):
    """Turn the compiled loops on (``numba``) or off (``numpy``) for one test."""
    saved = compiled.enabled()
    compiled.set_enabled(request.param)
    try:
        yield request.param
    finally:
        compiled.set_enabled(saved)
