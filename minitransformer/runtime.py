"""What runs: the array backend, the kernel set, whether its compiled kernels are active, and
which BLAS library and kernel do the matrix products.

Two things change the speed of a run by a large factor and show nowhere in its
results. Without Numba the fast kernel set runs its NumPy fallback (1.1-1.3x
slower). An OpenBLAS pinned to an old core type (``OPENBLAS_CORETYPE=Haswell``,
set on some shared machines for old builds) runs the matrix products at about
half speed on an AVX-512 CPU. So every run says what ran: :func:`describe` is
recorded in ``provenance.json`` (``versions.runtime``), shown by
``minitransformer info``, and :func:`summary_line` is printed at the start of
every training run.

The BLAS kernel is the name OpenBLAS (or MKL) reports for the code path it
chose, read with ``threadpoolctl`` when it is installed (``pip install
threadpoolctl``; without it the kernel is ``None``).
"""
from __future__ import annotations

import os

__all__ = ["describe", "summary_line", "available_memory", "BLAS_PINS"]

#: Environment variables that pin OpenBLAS's kernel or cache model (read once, at NumPy's import).
BLAS_PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_VERBOSE", "MKL_ENABLE_INSTRUCTIONS")
COMPILED_HINT = "pip install numba (or minitransformer[fast])"


def _compiled() -> tuple[bool, str]:
    """(whether the fast set's compiled kernels run, and a note: the Numba version, or why not)."""
    from minitransformer import backend, kernels
    if not kernels.fast:
        return False, "the reference kernels are selected (no compiled kernels in that set)"
    if backend.name() == "cupy":
        return False, "on the GPU the fast kernels are CuPy's"
    from minitransformer.fast.engine import compiled
    if not compiled.AVAILABLE:
        return False, f"Numba is not installed: the fast kernels run their NumPy fallback, 1.1-1.3x slower; " \
                      f"{COMPILED_HINT}"
    if not compiled.enabled():
        return False, "the compiled kernels are switched off (fast.engine.compiled.set_enabled(False))"
    import numba
    from minitransformer.fast import fused_attention
    from minitransformer.fast.engine import blas
    note = f"Numba {numba.__version__}"
    import numpy as np
    compiled.usable(np.zeros(1))  # starts the threads, as the first kernel would
    if blas.on_pool():
        note += f", one pool of {compiled.threads()} OpenMP threads (products as compiled loops)"
    elif compiled.one_pool():
        note += ", OpenMP threads"
    if fused_attention.enabled():
        note += ", attention loop calling BLAS" if blas.available() else \
            ", attention loop asked for but no ILP64 OpenBLAS to call: NumPy's products run"
    return True, note


def _blas() -> list[dict]:
    """The BLAS libraries loaded in this process: library, version, kernel, threads."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        import numpy as np
        try:
            built = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
        except (TypeError, KeyError, AttributeError):  # NumPy < 1.26: no dict mode
            built = {}
        return [{"library": built.get("name"), "version": built.get("version"), "kernel": None, "threads": None,
                 "note": "pip install threadpoolctl to see the BLAS kernel"}]
    return [{"library": info.get("internal_api"), "version": info.get("version"),
             "kernel": info.get("architecture"), "threads": info.get("num_threads")}
            for info in threadpool_info() if info.get("user_api") == "blas"]


def describe(ranks: int = 1) -> dict:
    """``{"ranks", "backend", "kernels", "compiled", "compiled_note", "blas": [...], "blas_pins": {...},
    "blas_thread_timeout"}``: what runs in this process (JSON-ready). ``ranks``: the
    data-parallel processes this one is part of; ``blas_pins``: the pinning variables that
    are set; ``blas_thread_timeout``: ``OPENBLAS_THREAD_TIMEOUT`` or None (how long idle
    BLAS threads spin: :mod:`minitransformer.fast.engine.parallel`)."""
    from minitransformer import backend, kernels
    compiled, note = _compiled()
    return {"ranks": ranks, "backend": backend.name(), "kernels": kernels.name(), "compiled": compiled,
            "compiled_note": note,
            "blas": _blas(), "blas_pins": {v: os.environ[v] for v in BLAS_PINS if v in os.environ},
            "blas_thread_timeout": os.environ.get("OPENBLAS_THREAD_TIMEOUT")}


def summary_line(d: dict | None = None) -> str:
    """One line for the start of a run, e.g. ``kernels: fast, compiled (Numba 0.60.0); BLAS: openblas
    0.3.31, kernel SkylakeX, 2 threads``, with a hint when the compiled kernels are off or BLAS is pinned."""
    d = describe() if d is None else d
    kernels = d["kernels"]
    if d["kernels"] == "fast" and d["backend"] != "cupy":
        kernels += f", compiled ({d['compiled_note']})" if d["compiled"] else f", NOT compiled: {d['compiled_note']}"
    blas = "; ".join(f"{b['library']} {b['version']}" + (f", kernel {b['kernel']}" if b.get("kernel") else "")
                     + (f", {b['threads']} thread{'s' * (b['threads'] != 1)}" if b.get("threads") else "")
                     + (f" ({b['note']})" if b.get("note") else "") for b in d["blas"]) or "none found"
    ranks = d.get("ranks", 1)
    line = (f"{ranks} data-parallel ranks, each: " if ranks > 1 else "") + \
        f"backend {d['backend']}; kernels: {kernels}; BLAS: {blas}"
    timeout = d.get("blas_thread_timeout")
    if d["backend"] != "cupy" and any(b.get("library") == "openblas" for b in d["blas"]):
        line += (f", idle threads sleep after 2^{timeout} cycles" if timeout is not None else
                 ", idle threads spin 0.1 s (OPENBLAS_THREAD_TIMEOUT unset: the CPU thread pool stays at one "
                 "thread; set it before NumPy loads, as the minitransformer command does)")
    if d["blas_pins"]:
        line += ("; BLAS pinned by " + ", ".join(f"{k}={v}" for k, v in d["blas_pins"].items())
                 + " (on a newer CPU a pin can halve the speed of matrix products: unset them)")
    return line


def available_memory() -> int | None:
    """Bytes of memory this machine can still give a process (Linux's ``MemAvailable``; else its
    physical memory), or None where neither can be read."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None
