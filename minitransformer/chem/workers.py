"""RDKit work on many molecules, spread over the CPU's cores in worker processes.

Writing 200,000 molecules as random SMILES (RDKit parses, renumbers and writes
each one, about 0.3 ms) or 1.2 million in Kekule form takes minutes on one
core, and nothing else runs meanwhile: training waits for its data. RDKit holds
Python's lock while it works, so threads would not help; :func:`map_chunks`
hands the chunks to worker processes instead.

The workers come from a ``forkserver`` (a clean process that forks each worker),
not from forking the trainer itself, whose BLAS and compiled-kernel threads a
plain fork would copy in whatever state they were. The pool is made on first use
and kept for the process's life (phase 2 asks for new random writings every
epoch). Below :data:`MIN_PARALLEL` molecules, or with one core, or with
``MINITRANSFORMER_WORKERS=1``, the chunks run here, one after another: the
results are the same either way, because every chunk is a pure function of its
arguments (its random stream is its own).
"""
from __future__ import annotations

import atexit
import os
from typing import Callable, Sequence

#: Below this many molecules the work stays in this process (a pool costs about a second to start).
MIN_PARALLEL = 20_000
_POOL = {"executor": None, "size": 0}


def worker_count() -> int:
    """``MINITRANSFORMER_WORKERS`` if set (1 or 0: no workers), else the cores this process may use."""
    value = os.environ.get("MINITRANSFORMER_WORKERS", "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise ValueError(f"MINITRANSFORMER_WORKERS={value!r} is not a whole number; set it to the number of "
                             "worker processes (1 for none), or unset it") from None
    from minitransformer.cpus import usable_cpus
    return usable_cpus()


def _executor(size: int):
    if _POOL["executor"] is None or _POOL["size"] != size:
        import concurrent.futures
        import multiprocessing
        shutdown()
        _POOL["executor"] = concurrent.futures.ProcessPoolExecutor(
            max_workers=size, mp_context=multiprocessing.get_context("forkserver"))
        _POOL["size"] = size
    return _POOL["executor"]


def shutdown() -> None:
    """Stop the worker processes (at exit, or before making a pool of another size)."""
    if _POOL["executor"] is not None:
        _POOL["executor"].shutdown(wait=True, cancel_futures=True)
        _POOL["executor"], _POOL["size"] = None, 0


atexit.register(shutdown)


def map_chunks(fn: Callable, chunks: Sequence, total: int) -> list:
    """``[fn(chunk) for chunk in chunks]``, in order, on worker processes when ``total`` (the
    molecules in all chunks) is at least :data:`MIN_PARALLEL` and more than one core may be used.
    ``fn`` must be a module-level function (it is sent to the workers by name)."""
    size = min(worker_count(), len(chunks))
    if total < MIN_PARALLEL or size <= 1:
        return [fn(chunk) for chunk in chunks]
    return list(_executor(size).map(fn, chunks))
