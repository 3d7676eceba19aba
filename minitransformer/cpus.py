"""The CPUs and threads this process may use, read from the machine and the environment.

Several rooms ask the same two questions: how many cores may this process run on (the
data-parallel launcher, the RDKit worker processes, the time plan, the fast set's thread
pool), and how many BLAS threads does the environment ask for. They are answered here,
below everything that uses them, so that none of those rooms reaches into another's
machinery for them. ``OPENBLAS_THREAD_TIMEOUT``'s two values are the command's choice per
kind of work, measured in :mod:`minitransformer.fast.engine.parallel` (its module notes).
"""
from __future__ import annotations

import os

__all__ = ["usable_cpus", "blas_threads_asked", "THREAD_VARIABLES", "TRAINING_THREAD_TIMEOUT",
           "DECODING_THREAD_TIMEOUT"]

#: The environment variables that set a BLAS library's threads, in the order they are read.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
TRAINING_THREAD_TIMEOUT = 8  # OPENBLAS_THREAD_TIMEOUT for training (fast/engine/parallel.py's module notes)
DECODING_THREAD_TIMEOUT = 22  # and for decoding


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask, else the machine's count)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def blas_threads_asked() -> int | None:
    """The BLAS threads the environment asks for (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``,
    ``MKL_NUM_THREADS``, the first set), or None."""
    for var in THREAD_VARIABLES:
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) >= 1:
            return int(value)
    return None
