"""The BLAS thread settings of a benchmark process. Imports nothing but the standard
library: a script calls :func:`configure_from_argv` before anything imports NumPy.

BLAS reads its thread count, and OpenBLAS its idle-thread timeout, once, when
NumPy is first imported. ``import minitransformer`` no longer sets
``OPENBLAS_THREAD_TIMEOUT``: programs do (see minitransformer/fast/parallel.py).
"""
from __future__ import annotations

import argparse
import os

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
DEFAULT_THREADS = 2


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
    """:func:`set_blas_threads` with the ``--threads`` of ``argv`` (default 2)."""
    set_blas_threads(threads_from_argv(argv))
