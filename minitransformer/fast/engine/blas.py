r"""Matrix products called from inside compiled loops: BLAS's ``gemm`` for Numba kernels.

A Numba loop can call ``np.dot``, but only on contiguous arrays, and each call
checks its arguments and allocates its result (``benchmarks/RESULTS.md``, session
13: attention built that way ran slower than NumPy's batched products). The
fused attention (:mod:`minitransformer.fast.fused_attention`) instead calls the
BLAS routine itself, with leading dimensions, so that it reads :math:`Q`, :math:`K`
and :math:`V` straight out of the fused projection's (B, T, 3, H, d) buffer and
writes its results into strided buffers, without a copy.

**Which BLAS.** The one NumPy loaded: its wheels bundle OpenBLAS built with 64-bit
integers (ILP64) and the symbol names ``scipy_cblas_sgemm64_`` /
``scipy_cblas_dgemm64_``. Only such names are accepted (``cblas_?gemm64_`` too):
the integer width is part of the call, and a 32-bit build called with 64-bit
integers would read garbage. Where none is found (NumPy built against MKL, or
an LP64 OpenBLAS) :func:`available` says no and the fast attention runs its
NumPy products instead.

**How the call is made.** The routine's address is registered under a fixed
name in LLVM's symbol table (``llvmlite.binding.add_symbol``) before anything is
compiled, and the kernels declare an external function of that name. Their
machine code then names the symbol rather than an address, so Numba's on-disk
cache works: a new process loads the compiled kernels (about 0.2 s) and links
them to this process's BLAS. (A ctypes function pointer, an earlier prototype,
is baked into the code as an address, and Numba refuses to cache it.)

The call itself (CBLAS, row-major) is declared beside the kernels that make it,
in :mod:`minitransformer.fast.fused_attention`.
"""
from __future__ import annotations

import ctypes

from minitransformer.fast.engine import compiled, parallel

# The names the kernels call (the 64: the integers are 64 bits wide). The kernels that name
# them, and the call's signature, live in fused_attention.py, so that Numba's disk cache,
# which is refreshed when a kernel's own file changes, never keeps code older than them:
# change a name here and there together.
SYMBOLS = {"s": "minitransformer_cblas_sgemm_ilp64", "d": "minitransformer_cblas_dgemm_ilp64"}
# where an ILP64 OpenBLAS keeps them
LIBRARY_NAMES = {"s": ("scipy_cblas_sgemm64_", "cblas_sgemm64_"), "d": ("scipy_cblas_dgemm64_", "cblas_dgemm64_")}

_state = {"library": None, "path": None, "thread_setter": None}


def _find_library():
    """(path, {"s": address, "d": address}, thread setter) of the first OpenBLAS with
    both ILP64 routines, or None."""
    for path in parallel.openblas_libraries():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        addresses = {}
        for kind, names in LIBRARY_NAMES.items():
            for name in names:
                if hasattr(library, name):
                    addresses[kind] = ctypes.cast(getattr(library, name), ctypes.c_void_p).value
                    break
        setter = parallel.openblas_thread_setter(library)
        if len(addresses) == 2 and setter is not None:
            return path, addresses, setter
    return None


def _register() -> bool:
    """Find the library and register its routines under :data:`SYMBOLS` (once)."""
    if _state["library"] is None:
        found = _find_library() if compiled.AVAILABLE else None
        if found is None:
            _state["library"] = False
        else:
            import llvmlite.binding as llvm

            path, addresses, setter = found
            for kind, address in addresses.items():
                llvm.add_symbol(SYMBOLS[kind], address)
            _state.update(library=True, path=path, thread_setter=setter)
    return _state["library"]


def available() -> bool:
    """True when compiled kernels may call BLAS: Numba is installed and an ILP64 OpenBLAS
    is loaded (see the module notes)."""
    return _register()


def library_path() -> str | None:
    """The library whose routines the kernels call (None where :func:`available` is False)."""
    return _state["path"] if available() else None


def one_thread():
    """A context in which BLAS runs on one thread: the compiled loop's own threads call it
    (:func:`minitransformer.fast.engine.parallel.one_blas_thread` with this library's setter)."""
    return parallel.one_blas_thread(_state["thread_setter"] if available() else None)
