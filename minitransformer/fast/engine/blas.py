r"""Matrix products called from inside compiled loops: BLAS's ``gemm`` for Numba kernels,
and a layer's three products split over the compiled loops' threads.

A Numba loop can call ``np.dot``, but only on contiguous arrays, and each call
checks its arguments and allocates its result (``benchmarks/RESULTS.md``, session
13: attention built that way ran slower than NumPy's batched products). The
kernels here, and the fused attention (:mod:`minitransformer.fast.fused_attention`),
instead call the BLAS routine itself (:func:`gemm`), with leading dimensions, so
that they read their operands in place (the attention reads :math:`Q`, :math:`K`
and :math:`V` straight out of the fused projection's (B, T, 3, H, d) buffer) and
write into strided buffers, without a copy.

**Which BLAS.** The one NumPy loaded: its wheels bundle OpenBLAS built with 64-bit
integers (ILP64) and the symbol names ``scipy_cblas_sgemm64_`` /
``scipy_cblas_dgemm64_``. Only such names are accepted (``cblas_?gemm64_`` too):
the integer width is part of the call, and a 32-bit build called with 64-bit
integers would read garbage. Where none is found (NumPy built against MKL, or
an LP64 OpenBLAS) :func:`available` says no and the fast kernels run NumPy's
products instead.

**How the call is made.** The routine's address is registered under a fixed
name in LLVM's symbol table (``llvmlite.binding.add_symbol``) before anything is
compiled, and the kernels declare an external function of that name. Their
machine code then names the symbol rather than an address, so Numba's on-disk
cache works: a new process loads the compiled kernels (about 0.2 s) and links
them to this process's BLAS. (A ctypes function pointer, an earlier prototype,
is baked into the code as an address, and Numba refuses to cache it.) Numba's
disk cache is refreshed when a kernel's own file changes, not when a function it
inlines from another file does: after changing :func:`gemm`, touch
``fast/fused_attention.py`` too, whose kernels inline it.

**A layer's products on the compiled loops' threads.** Where those threads are
OpenMP's (:func:`minitransformer.fast.engine.compiled.one_pool`), the linear layer's three products
run as compiled loops too (:func:`product`, :func:`weight_gradient`):
each thread makes one ``gemm`` call on its share of the rows (of the output, or of
the weight's gradient), with BLAS on one thread. Then every kernel of a step, products
included, runs on one pool of threads that stay awake between kernels, instead of
OpenBLAS's threads for the products and Numba's for the rest, each put to sleep and
woken again for every call; on a 2-core VM a wake-up cost about 250 us a call (the
notes of :mod:`minitransformer.fast.engine.compiled`). Each element of a product is one
``gemm``'s sum over the whole inner dimension, whichever share of rows it falls in.
"""
from __future__ import annotations

import ctypes

import numpy as np

from minitransformer.fast.engine import compiled, parallel
from minitransformer.fast.engine.compiled import numba, prange

# The names the kernels call (the 64: the integers are 64 bits wide), declared below (gemm)
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


def on_pool() -> bool:
    """True when the compiled loops run on OpenMP's threads
    (:func:`minitransformer.fast.engine.compiled.one_pool`), two or more: there a layer's products
    and attention run as compiled loops on them (on one thread NumPy's product is the same single
    ``gemm`` call, and attention's loop showed no clear gain)."""
    return compiled.one_pool() and compiled.threads() > 1


def usable(*arrays) -> bool:
    """True when :func:`linear_product` and :func:`linear_gradients` should take these arrays: the
    products run on the pool (:func:`on_pool`), this is the main thread, BLAS can be called
    (:func:`available`), and the arrays are host float32 or float64 arrays of one dtype, none
    empty (NumPy's products give the empty and all-zero results)."""
    return compiled.usable(*arrays) and on_pool() and len({a.dtype for a in arrays}) == 1 \
        and all(a.size for a in arrays) and available()


def openmp_loads() -> bool:
    """Whether Numba's OpenMP threads can start here (its library finds an OpenMP runtime)."""
    try:
        from numba.np.ufunc import omppool  # noqa: F401
    except ImportError:
        return False
    return True


if compiled.AVAILABLE and available() and openmp_loads():  # one pool of threads for every kernel (notes)
    compiled.prefer_threading_layer("omp")


ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS's enumerations

if compiled.AVAILABLE:
    from llvmlite import ir
    from numba import types
    from numba.extending import intrinsic

    _i32, _i64 = types.int32, types.int64
    # void cblas_?gemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc), 64-bit
    # integers; the routines are registered under these names by _register
    _sgemm = types.ExternalFunction(SYMBOLS["s"], types.void(
        _i32, _i32, _i32, _i64, _i64, _i64, types.float32, types.voidptr, _i64, types.voidptr, _i64,
        types.float32, types.voidptr, _i64))
    _dgemm = types.ExternalFunction(SYMBOLS["d"], types.void(
        _i32, _i32, _i32, _i64, _i64, _i64, types.float64, types.voidptr, _i64, types.voidptr, _i64,
        types.float64, types.voidptr, _i64))

    @intrinsic
    def _pointer(typingctx, address):
        """An address (an integer: ``array.ctypes.data``) as ``void *``."""
        if not isinstance(address, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            return builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        return types.voidptr(address), codegen

    @numba.njit(cache=True, inline="always")
    def gemm(single, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        r"""C (m, n) = alpha op(A) op(B) + beta C, row-major, in float32 (``single``) or float64,
        op(A) (m, k), op(B) (k, n). a, b, c: the addresses of each matrix's first element;
        ``trans_*``: True for op(X) = X^T; ld*: the distance in elements between two rows as stored."""
        ta = TRANS if trans_a else NO_TRANS
        tb = TRANS if trans_b else NO_TRANS
        if single:
            _sgemm(ROW_MAJOR, ta, tb, m, n, k, numba.float32(alpha), _pointer(a), lda, _pointer(b), ldb,
                   numba.float32(beta), _pointer(c), ldc)
        else:
            _dgemm(ROW_MAJOR, ta, tb, m, n, k, numba.float64(alpha), _pointer(a), lda, _pointer(b), ldb,
                   numba.float64(beta), _pointer(c), ldc)


# ---------------------------------------------------------------------------
# A linear layer's products, one gemm call per share of rows
# ---------------------------------------------------------------------------
# run_product picks each loop's build by the product's work (MIN_WORK): the threaded one runs the `parts`
# shares at once. Every array is C-contiguous.
@compiled._jit
def product(a, B, trans_b, bias, has_bias, y, parts):
    r"""y = a op(B) (+ bias): a (N, k); op(B) (k, n) is B, or B^T when ``trans_b`` (B stored (n, k));
    bias (n,); y (N, n). Row share p of ``parts`` is rows pN/parts .. (p+1)N/parts - 1, one ``gemm``,
    then the bias added to them while they are in the cache. The forward's y = x W + b and the
    backward's dx = dy W^T."""
    N, k = a.shape
    n = y.shape[1]
    single = a.itemsize == 4
    for p in prange(parts):
        r0, r1 = p * N // parts, (p + 1) * N // parts
        if r1 > r0:
            gemm(single, False, trans_b, r1 - r0, n, k, 1.0, a[r0:].ctypes.data, k, B.ctypes.data, B.shape[1], 0.0,
                 y[r0:].ctypes.data, n)
            if has_bias:
                for r in range(r0, r1):
                    for j in range(n):
                        y[r, j] += bias[j]


@compiled._jit
def weight_gradient(x, dy, dW, parts):
    r"""dW = x^T dy: x (N, K), dy (N, M), dW (K, M); share p is dW's rows pK/parts .. (p+1)K/parts - 1
    (x's columns), each summed over all N rows by one ``gemm``."""
    N, K = x.shape
    M = dy.shape[1]
    single = x.itemsize == 4
    for p in prange(parts):
        c0, c1 = p * K // parts, (p + 1) * K // parts
        if c1 > c0:
            gemm(single, True, False, c1 - c0, M, N, 1.0, x.ctypes.data + c0 * x.itemsize, K, dy.ctypes.data, M,
                 0.0, dW[c0:].ctypes.data, M)


#: multiply-adds from which a product is cut into one share per thread: a decoding step's
#: (64, 256) x (256, 768) is (medium's sampling 1.17x with it, 0.96x without), small's
#: (64, 64) x (64, 256) is not (its sampling 0.73x when cut at 2^20)
MIN_WORK = 1 << 21


def run_product(kernel, N, K, M, *args):
    """``kernel(*args, parts)`` for a product of N x K x M multiply-adds: its threaded build cut
    into one share per thread from :data:`MIN_WORK` on, else its serial build in one share."""
    threads = compiled.threads()
    if N * K * M >= MIN_WORK and threads > 1:
        kernel.parallel(*args, threads)
    else:
        kernel.serial(*args, 1)


def linear_product(x, W, b=None):
    r"""y = x W + b, (N, M), on the compiled loops' threads (:func:`usable` said yes).
    x: (N, K) and W: (K, M) C-contiguous, b: (M,) or None."""
    y = np.empty((x.shape[0], W.shape[1]), dtype=x.dtype)  # (N, M)
    with one_thread():
        bias = W[0] if b is None else np.ascontiguousarray(b)  # (M,); W[0] is not read: no bias
        run_product(product, x.shape[0], W.shape[0], W.shape[1], x, W, False, bias, b is not None, y)
    return y


def linear_gradients(dy, x, W, has_bias: bool):
    r"""(dx = dy W^T (N, K), dW = x^T dy (K, M), db = \mathbf{1}^\top dy (M,) or None) on the compiled
    loops' threads (:func:`usable` said yes). dy: (N, M), x: (N, K), W: (K, M), C-contiguous.
    db is BLAS's matrix-vector product on this thread, as the fast linear's."""
    dx = np.empty(x.shape, dtype=x.dtype)  # (N, K)
    dW = np.empty(W.shape, dtype=x.dtype)  # (K, M)
    with one_thread():
        run_product(product, *x.shape, W.shape[1], dy, W, True, W[0], False, dx)  # W[0]: a bias not read
        run_product(weight_gradient, *x.shape, W.shape[1], x, dy, dW)
        db = np.ones(dy.shape[0], dtype=dy.dtype) @ dy if has_bias else None  # (M,)
    return dx, dW, db
