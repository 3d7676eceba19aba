"""The array libraries behind :mod:`minitransformer.backend`, and what only matters on a GPU.

:func:`load` imports the module a backend name stands for: NumPy, CuPy (after checking
that a device answers) or the tests' strict stand-in for CuPy
(:mod:`minitransformer.testing.strict`: NumPy arrays that refuse host conversions as
CuPy's do). :func:`synchronize` waits for queued device work (for timing), and
:func:`forbid_host_sync` turns every read of a device value back to the host into an
error, the kind of read that makes a GPU wait: the tests hold the training step to none.
"""
from __future__ import annotations

import contextlib
import os
import sys


def load(name: str, names=("numpy", "cupy", "strict")):
    """The array module the backend ``name`` stands for; a one-line RuntimeError when CuPy
    or a GPU is missing, a ValueError for a name not in ``names``."""
    if name == "numpy":
        import numpy
        return numpy
    if name == "strict":
        from minitransformer.testing.strict import STRICT
        return STRICT
    if name == "cupy":
        try:
            import cupy  # noqa: WPS433 (optional GPU extra)
        except ImportError as err:
            raise RuntimeError(
                "backend 'cupy' was requested but CuPy is not installed. Install the GPU extra "
                "(pip install 'minitransformer[gpu]', or the cupy-cudaXXx wheel for your CUDA) "
                "or use backend 'numpy'."
            ) from err
        try:
            cupy.cuda.runtime.getDeviceCount()
        except Exception as err:  # no driver, no device
            raise RuntimeError(f"backend 'cupy' was requested but no usable GPU was found: {err}") from err
        return cupy
    raise ValueError(f"unknown backend {name!r}; expected one of {tuple(names)}")


def use_from_environment(use) -> Exception | None:
    """Switch to the backend ``MINITRANSFORMER_BACKEND`` names with ``use`` (:func:`backend.use`).
    A name that is no backend, or CuPy or a GPU missing, leaves NumPy in use, and the problem is
    returned as one line rather than raised: importing never fails on it, and the command says
    it before any work."""
    value = os.environ.get("MINITRANSFORMER_BACKEND", "numpy").strip().lower() or "numpy"
    try:
        use(value)
    except (ValueError, RuntimeError) as err:
        use("numpy")
        return type(err)(f"MINITRANSFORMER_BACKEND={value!r}: {err}; unset it or set it to numpy or cupy")
    return None


def synchronize() -> None:
    """Wait for queued GPU work. For timing only: it asks CuPy whenever CuPy is loaded (an idle
    device returns at once), and does nothing when it is not."""
    if "cupy" in sys.modules:
        sys.modules["cupy"].cuda.get_current_stream().synchronize()


@contextlib.contextmanager
def forbid_host_sync():
    """``with forbid_host_sync(): ...`` fails at the first read of a device value back to the
    host: CuPy's through ``cupyx.allow_synchronize(False)``, the strict stand-in's through
    :func:`minitransformer.testing.strict.refuse_host_reads`. Both guards are set whichever
    backend is active (each only ever sees its own arrays), so NumPy's arrays are never refused."""
    from minitransformer.testing.strict import refuse_host_reads
    with contextlib.ExitStack() as stack:
        stack.enter_context(refuse_host_reads())  # only the stand-in's arrays look at it
        if "cupy" in sys.modules:
            import cupyx
            stack.enter_context(cupyx.allow_synchronize(False))
        yield
