"""Helpers for the kernel tests (test_nn_*_kernels.py, through minitransformer.functional) and the
layer tests: seeded float64 arrays on the active backend."""
import numpy as np
import pytest

from minitransformer import backend


@pytest.fixture
def randn():
    """``randn(*shape, scale=1.0, dtype=np.float64)``: seeded normal values, on the
    active backend (call it inside the test, after ``any_backend`` switched it)."""
    g = np.random.default_rng(1234)

    def make(*shape, scale=1.0, dtype=np.float64):
        return backend.asarray((g.standard_normal(shape) * scale).astype(dtype))

    return make


@pytest.fixture
def host_rng():
    """A seeded NumPy generator for host-side choices (ids, masks, permutations)."""
    return np.random.default_rng(4321)
