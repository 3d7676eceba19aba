"""Shared by the GPU tests of tests/fast: comparing a fast result with its reference.

The fixtures ``on_gpu`` (CuPy for one test) and ``launches`` (the fused CUDA kernels
launched, counted by name) are in ``conftest.py``.
"""
from __future__ import annotations

import numpy as np

from minitransformer import backend

TOLERANCE = {"float64": 1e-12, "float32": 2e-6}  # relative to the tensor's largest entry
# Three Adam steps of a whole model: Adam divides by sqrt(v), so a gradient entry near 0
# turns a 1e-16 difference into a larger one, and on the CPU the fast GELU is the table
# (1e-8, fast/elementwise.py); weights of size 1 agree to 1e-7.
MODEL_TOLERANCE = 1e-7


def close(name, fast, ref, dtype, scale=None, tol=None):
    """Entry by entry, within TOLERANCE[dtype] of the larger of the tensor's largest
    entry and ``scale`` (or within ``tol``); the message names the tensor, the largest error and where."""
    a, b = backend.to_numpy(fast).astype(np.float64), backend.to_numpy(ref).astype(np.float64)
    assert a.shape == b.shape, f"{name}: shape {a.shape}, expected {b.shape}"
    if not a.size:
        return
    assert np.isfinite(a).all(), f"{name}: non-finite entries at {np.argwhere(~np.isfinite(a))[:3].tolist()}"
    err = np.abs(a - b)
    bound = (tol or TOLERANCE[dtype]) * max(np.abs(b).max(), scale or 0.0, 1e-300)
    where = np.unravel_index(err.argmax(), err.shape)
    assert err.max() <= bound, (f"{name} ({dtype}): largest error {err.max():.3e} at {where} "
                                f"(fast {a[where]:.9g}, reference {b[where]:.9g}), bound {bound:.3e}")


def dev(host_array, dtype):
    """``host_array`` on the active backend, in ``dtype``."""
    return backend.asarray(np.asarray(host_array, dtype=dtype))
