"""The BLAS thread settings of a benchmark process. Imports nothing but the standard
library: a script calls :func:`configure_from_argv` before anything imports NumPy.

BLAS reads its thread count, and OpenBLAS its idle-thread timeout, once, when
NumPy is first imported. So does OpenBLAS's kernel choice: some machines pin it
(``OPENBLAS_CORETYPE=Haswell``, ``OPENBLAS_L2_SIZE``), which halves the speed of
matrix products on an AVX-512 CPU, and a user's machine has no pin. The
benchmarks therefore drop both variables in their own processes and in every
process they start, unless ``--pinned`` is given (to measure the pinned figures,
labelled as such); tests and CI keep the environment they are given. ``import minitransformer`` no longer sets
``OPENBLAS_THREAD_TIMEOUT``: programs do (see minitransformer/fast/parallel.py).
"""
from __future__ import annotations

import argparse
import os

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
PIN_VARIABLES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
DEFAULT_THREADS = 2


def pinned_from_argv(argv) -> bool:
    """True when ``--pinned`` is among ``argv``: keep the machine's BLAS pins."""
    return "--pinned" in argv


def unpin(env: dict, pinned: bool = False) -> dict:
    """Remove :data:`PIN_VARIABLES` from ``env`` (in place) unless ``pinned``; return ``env``."""
    if not pinned:
        for var in PIN_VARIABLES:
            env.pop(var, None)
    return env


def set_blas_threads(n: int) -> None:
    """Set the BLAS/OpenMP thread-count variables to ``n``, and let OpenBLAS's idle
    threads sleep after about 1.5 ms instead of 0.1 s (``OPENBLAS_THREAD_TIMEOUT=22``
    unless set; see minitransformer/fast/parallel.py). Must run before ``import numpy``."""
    for var in THREAD_VARIABLES:
        os.environ[var] = str(n)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")


def threads_from_argv(argv) -> int:
    """Just ``--threads`` from the command line (the script's full parser runs later)."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    return early.parse_known_args(argv)[0].threads


def configure_from_argv(argv) -> None:
    """:func:`set_blas_threads` with the ``--threads`` of ``argv`` (default 2), and the BLAS pins
    dropped from this process's environment unless ``argv`` has ``--pinned``."""
    set_blas_threads(threads_from_argv(argv))
    unpin(os.environ, pinned_from_argv(argv))
