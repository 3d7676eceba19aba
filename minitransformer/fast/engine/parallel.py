r"""Independent pieces of array work, spread over the CPU's cores.

NumPy runs every element-wise operation (``exp``, ``*``, ``max``, ...) on one
core; only BLAS spreads a large matrix product over several. So on a 2-core
machine a transformer step spends its GEMMs on both cores and everything else
on one. Some of that work splits into pieces that do not touch each other:

* attention, one block of sequences at a time (each sequence attends only to
  itself), with its small per-head GEMMs, which BLAS would run on one core;
* GELU, one block of memory at a time (it is element-wise).

NumPy releases Python's global lock inside its loops, so pieces handed to a few
threads really run at the same time. :func:`parallel_for` does that. Each piece
also touches less memory than the whole array, so it runs from the CPU cache:
even on one thread, blocks are faster than one pass over a large array.

While pieces that multiply matrices run on the pool, BLAS is told to use one
thread (OpenBLAS's ``openblas_set_num_threads_local``, which sets the count for
the whole process and returns the old one, restored right after): the pool
already occupies the cores, and each piece's GEMM starting BLAS threads of its
own would have them fight over the cores. The calling thread only waits
meanwhile, so its own large GEMMs, before and after, keep all of BLAS's threads.
Where that call is not available (another BLAS), such pieces run one after
another on the calling thread instead (still in cache-sized blocks).

On a GPU the whole array is one kernel launch per operation, which is cheaper
than several smaller ones: :func:`parallel_for` then calls the work once, on
everything. The results never depend on the number of threads: each piece writes
its own part of the output, and no sum runs across pieces.

**Idle BLAS threads.** After each product, OpenBLAS's threads by default keep
spinning for 2^28 cycles (about 0.1 s) before they sleep, and meanwhile they
hold a core that the pool needs: a pool of 2 on 2 cores then runs *slower* than
one thread. ``OPENBLAS_THREAD_TIMEOUT=N`` makes them spin 2^N cycles. Which N is
best depends on the work (``benchmarks/RESULTS.md``):

* **Training**: :data:`TRAINING_THREAD_TIMEOUT` (8: sleep at once). Every large
  product is followed by compiled loops (GELU, LayerNorm, attention) on all the
  cores; a BLAS thread still spinning takes one of them. A small model's
  attention forward ran 2.5 ms instead of 1.3 right after a 2-thread product at
  22 (about 1.5 ms of spinning), and whole training steps were 1.09-1.18x faster
  at 8 than at 22.
* **Decoding**: :data:`DECODING_THREAD_TIMEOUT` (22). Small products follow each
  other quickly with little work between them, and a sleeping thread is slow to
  wake: KV-cached sampling was 1.1-1.3x faster at 22 than at 8 (and 2^18 was
  1.3-1.8x slower than 2^22 when measured).

OpenBLAS reads it only when it loads, so it must be in the environment before
NumPy is imported. The library never changes your environment; the
``minitransformer`` command, the demos and the benchmarks set it first thing in
their own process (unless you set it), and a program of yours can do the same:
``os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "8")`` before any import.

**How many threads.** ``MINITRANSFORMER_THREADS`` if set; else the BLAS thread
count (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, else
the CPUs this process may use), provided the BLAS is OpenBLAS and its idle
threads sleep soon (``OPENBLAS_THREAD_TIMEOUT`` at most 22); otherwise 1,
which still runs the pieces in cache-sized blocks. :func:`set_threads` overrides it.
"""
from __future__ import annotations

import contextlib
import ctypes
import glob
import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

from minitransformer import backend
from minitransformer.cpus import (DECODING_THREAD_TIMEOUT, TRAINING_THREAD_TIMEOUT,  # noqa: F401 (module notes)
                                  blas_threads_asked, usable_cpus)

BLOCK_BYTES = 1 << 19  # aim for pieces of about this many bytes of their largest array (512 KiB)

_state = {"threads": None, "pool": None, "blas_setter": None}
_in_worker = threading.local()  # .active is True inside a pool thread: no nested pools
_section = threading.Lock()  # held while a parallel section runs (callers from several threads)


def _default_threads() -> int:
    value = os.environ.get("MINITRANSFORMER_THREADS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise ValueError(
                f"MINITRANSFORMER_THREADS={value!r} is not a positive integer; "
                "set it to the number of CPU threads to use (e.g. 2), or unset it"
            )
        return int(value)
    blas_threads = blas_threads_asked() or usable_cpus()
    if blas_threads > 1 and not _blas_sleeps_promptly():
        return 1  # spinning BLAS threads would take the pool's cores (module notes)
    return blas_threads


def _blas_sleeps_promptly() -> bool:
    """True for OpenBLAS with ``OPENBLAS_THREAD_TIMEOUT`` <= 22 (see the module notes)."""
    value = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "").strip()
    return value.isdigit() and int(value) <= 22 and _blas_setter() is not None


def threads() -> int:
    """How many threads :func:`parallel_for` uses on the CPU."""
    if _state["threads"] is None:
        _state["threads"] = _default_threads()
    return _state["threads"]


def set_threads(n: int) -> None:
    """Use ``n`` (>= 1) CPU threads from now on (1 = everything on the calling thread)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"set_threads: need a positive integer, got {n!r}")
    if _state["pool"] is not None:
        _state["pool"].shutdown(wait=True)
    _state["threads"], _state["pool"] = n, None


def openblas_libraries() -> list[str]:
    """Paths of the OpenBLAS libraries this process has loaded (Linux), then those beside NumPy."""
    import numpy

    here = os.path.dirname(numpy.__file__)
    candidates = []
    if os.path.exists("/proc/self/maps"):  # Linux: the libraries this process has loaded
        with open("/proc/self/maps") as maps:
            candidates = sorted({line.split()[-1] for line in maps if "openblas" in line.lower()
                                 and line.split()[-1].startswith("/")})
    for folder in (os.path.join(here, "..", "numpy.libs"), os.path.join(here, ".dylibs")):
        candidates += sorted(glob.glob(os.path.join(folder, "*openblas*")))
    return candidates


def openblas_thread_setter(library):
    """``openblas_set_num_threads_local`` of a loaded library (ctypes.CDLL), or None."""
    try:
        setter = library.openblas_set_num_threads_local
    except AttributeError:
        return None
    setter.argtypes, setter.restype = [ctypes.c_int], ctypes.c_int
    return setter


def _openblas_local_setter():
    """OpenBLAS's ``openblas_set_num_threads_local`` from the library NumPy loaded, or None."""
    for path in openblas_libraries():
        try:
            setter = openblas_thread_setter(ctypes.CDLL(path))
        except OSError:
            continue
        if setter is not None:
            return setter
    return None


def _start_worker() -> None:
    """Runs once in each pool thread: mark it (no pools inside the pool)."""
    _in_worker.active = True


def _pool():
    if _state["pool"] is None:
        _state["pool"] = ThreadPoolExecutor(threads(), thread_name_prefix="minitransformer",
                                            initializer=_start_worker)
    return _state["pool"]


def _blas_setter():
    """The BLAS thread-count setter (see the module notes), looked up once; None if absent."""
    if _state["blas_setter"] is None:
        _state["blas_setter"] = _openblas_local_setter() or False
    return _state["blas_setter"] or None


def batch_slices(n: int, bytes_per_item: int) -> list[slice]:
    """Split ``range(n)`` into consecutive slices for :func:`parallel_for`.

    Each piece holds about :data:`BLOCK_BYTES` of its largest array
    (``bytes_per_item`` per index), and there are at least as many pieces as
    threads (when ``n`` allows). Work smaller than one block (a decoding step)
    stays whole: handing it to a thread would cost more than it saves. On a GPU:
    one slice, everything.
    """
    if backend.name() == "cupy" or n <= 1 or n * bytes_per_item < BLOCK_BYTES:
        return [slice(0, n)]
    pieces = max(threads(), math.ceil(n * bytes_per_item / BLOCK_BYTES))
    size = math.ceil(n / min(n, pieces))  # items per piece
    return [slice(i, min(i + size, n)) for i in range(0, n, size)]


def parallel_for(fn, pieces: list, uses_blas: bool = False) -> None:
    """Call ``fn(piece)`` for every piece, on the CPU thread pool when that pays.

    ``fn`` must write its results into arrays it shares with the caller and return
    nothing; pieces must not write to the same memory. ``uses_blas``: ``fn``
    multiplies matrices: BLAS runs on one thread meanwhile (or, where that cannot
    be set, the pieces run one after another here). Exceptions from a piece are
    raised here.
    """
    blas = _blas_setter() if uses_blas else None
    if (len(pieces) == 1 or threads() == 1 or getattr(_in_worker, "active", False)
            or backend.name() == "cupy" or (uses_blas and blas is None)):
        for piece in pieces:
            fn(piece)
        return
    with one_blas_thread(blas):  # one BLAS thread per piece while the pool runs
        futures = [_pool().submit(fn, piece) for piece in pieces]
        wait(futures)  # every piece has finished (or failed) before anything is restored
    for future in futures:
        future.result()  # the first piece's error, if any, is raised here


@contextlib.contextmanager
def one_blas_thread(blas):
    """While the block runs, no other parallel section starts and BLAS uses one thread
    (``blas``: OpenBLAS's ``openblas_set_num_threads_local``, or None to leave it): for
    work that runs its own products on several threads (:func:`parallel_for`'s pool, or
    a compiled loop that calls BLAS itself, :mod:`minitransformer.fast.engine.blas`)."""
    with _section:  # one parallel section at a time: the BLAS setting is the process's
        previous = blas(1) if blas else None
        try:
            yield
        finally:
            if blas:
                blas(previous)
