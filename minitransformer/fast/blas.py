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
them to this process's BLAS. (A ctypes function pointer, session 12's prototype,
is baked into the code as an address, and Numba refuses to cache it.)

The CBLAS call, row-major, :math:`C \leftarrow \alpha\,\mathrm{op}(A)\,\mathrm{op}(B)
+ \beta C` with :math:`\mathrm{op}(A)` (m, k), :math:`\mathrm{op}(B)` (k, n), C (m, n);
``lda`` is the distance in elements between two rows of A as stored.
"""
from __future__ import annotations

import ctypes

from minitransformer.fast import compiled, parallel

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS's enumerations
# the names the kernels call; the 64 says the integers are 64 bits wide
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
    (:func:`minitransformer.fast.parallel.one_blas_thread` with this library's setter)."""
    return parallel.one_blas_thread(_state["thread_setter"] if available() else None)


if compiled.AVAILABLE:
    import numba
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    _i32, _i64 = types.int32, types.int64
    # void cblas_?gemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)
    _sgemm = types.ExternalFunction(SYMBOLS["s"], types.void(
        _i32, _i32, _i32, _i64, _i64, _i64, types.float32, types.voidptr, _i64, types.voidptr, _i64,
        types.float32, types.voidptr, _i64))
    _dgemm = types.ExternalFunction(SYMBOLS["d"], types.void(
        _i32, _i32, _i32, _i64, _i64, _i64, types.float64, types.voidptr, _i64, types.voidptr, _i64,
        types.float64, types.voidptr, _i64))

    @intrinsic
    def pointer(typingctx, address):
        """An address (an integer: ``array.ctypes.data``) as ``void *``."""
        if not isinstance(address, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        return types.voidptr(address), codegen

    @numba.njit(cache=True, inline="always")
    def gemm(single, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        r"""C (m, n) = alpha op(A) op(B) + beta C, row-major, in float32 (``single``) or
        float64. a, b, c: the int64 addresses of each matrix's first element;
        ``trans_*``: True for op(X) = X^T; ld*: row distances in elements."""
        ta = TRANS if trans_a else NO_TRANS
        tb = TRANS if trans_b else NO_TRANS
        if single:
            _sgemm(ROW_MAJOR, ta, tb, m, n, k, numba.float32(alpha), pointer(a), lda, pointer(b), ldb,
                   numba.float32(beta), pointer(c), ldc)
        else:
            _dgemm(ROW_MAJOR, ta, tb, m, n, k, numba.float64(alpha), pointer(a), lda, pointer(b), ldb,
                   numba.float64(beta), pointer(c), ldc)
