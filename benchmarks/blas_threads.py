"""The BLAS thread settings of a benchmark process. Imports nothing but the standard
library: a script calls :func:`configure_from_argv` before anything imports NumPy.

BLAS reads its thread count, and OpenBLAS its idle-thread timeout, once, when
NumPy is first imported. So does OpenBLAS's kernel choice: some machines pin it
(``OPENBLAS_CORETYPE=Haswell``, ``OPENBLAS_L2_SIZE``), which halves the speed of
matrix products on an AVX-512 CPU, and a user's machine has no pin. The
benchmarks therefore drop both variables in their own processes and in every
process they start, unless ``--pinned`` is given (to measure the pinned figures,
labelled as such); tests and CI keep the environment they are given. ``import minitransformer`` no longer sets
``OPENBLAS_THREAD_TIMEOUT``: programs do (see minitransformer/fast/engine/parallel.py).
"""
from __future__ import annotations

import argparse
import os

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
# OPENBLAS_THREAD_TIMEOUT for training and for decoding: the values of
# minitransformer.fast.engine.parallel (TRAINING_/DECODING_THREAD_TIMEOUT; a test checks they agree),
# repeated here because this module must not import NumPy
TIMEOUTS = {"train": "8", "decode": "22"}
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


def set_blas_threads(n: int, work: str = "train") -> None:
    """Set the BLAS/OpenMP thread-count variables to ``n``, and OpenBLAS's idle-thread
    timeout for ``work`` (``"train"``: sleep at once; ``"decode"``: after about 1.5 ms;
    :data:`TIMEOUTS`, unless set; see minitransformer/fast/engine/parallel.py). Must run before
    ``import numpy``."""
    for var in THREAD_VARIABLES:
        os.environ[var] = str(n)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", TIMEOUTS[work])


def work_env(env: dict, work: str) -> dict:
    """``env`` (in place) with OpenBLAS's idle-thread timeout for ``work`` unless set; returned."""
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", TIMEOUTS[work])
    return env


def threads_from_argv(argv) -> int:
    """Just ``--threads`` from the command line (the script's full parser runs later)."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    return early.parse_known_args(argv)[0].threads


def configure_from_argv(argv, work: str = "train") -> None:
    """:func:`set_blas_threads` with the ``--threads`` of ``argv`` (default 2) and ``work``'s
    timeout, and the BLAS pins dropped from this process's environment unless ``argv`` has
    ``--pinned``."""
    set_blas_threads(threads_from_argv(argv), work)
    unpin(os.environ, pinned_from_argv(argv))
