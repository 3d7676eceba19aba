r"""Fused GPU kernels for the fast set (CuPy only): one launch where CuPy needs many.

On a GPU a small model's training step is *launch-bound*: every CuPy operator is one
kernel launch and some microseconds of Python, whatever the size of its array, and
a device run (``benchmarks/RESULTS.md``) found 60 % of a step in three
chains of small element-wise operators: the Adam update (about a dozen launches per
parameter), layer normalisation (about ten each way, row sums as ``einsum``) and the
clipping of the gradients. This module writes each of them as one CUDA kernel
(``cupy.RawModule``, compiled by NVRTC on first use, kept by CuPy's cache on disk):

============================  =========================================================
kernel                        one launch does
============================  =========================================================
``adam_update``               :math:`m_t, v_t, \theta_t` of one tensor, in place
``layernorm_forward``         mean, biased variance, :math:`\hat x`, :math:`y` of every
                              row (one warp per row)
``layernorm_backward_dx``     :math:`dx` of every row (one warp per row)
``layernorm_backward_params`` partial :math:`\sum dy\,\hat x` and :math:`\sum dy` of each
                              column over blocks of rows; ``sum_parts`` adds the blocks
``softmax_rows``              the softmax of every row of the attention logits, in place
                              (masked logits are -inf; a fully masked row gives zeros)
``softmax_backward_rows``     :math:`dS = P \odot (dP - \sum_k dP\,P)` of every row, in place
``sum_squares``, ``scale_by`` a gradient's sum of squares, and its scaling by a factor on
                              the device (the global-norm clipping, two launches a tensor)
``gelu_exact``                GELU and its derivative (``erf``), one thread per element
============================  =========================================================

Where an optimizer's tensors are views of flat buffers (:mod:`minitransformer.fast.engine.flat`),
:mod:`minitransformer.fast.engine.cuda_flat` goes one step further: Adam and the clipping's
sum of squares over every tensor in one launch each.

The math is that of the reference kernels, per element or per row, with every sum
and every intermediate in float64 whatever the arrays' dtype (as the compiled CPU
loops of :mod:`minitransformer.fast.engine.compiled`), so float32 results are the
reference's up to the rounding of the result; the sums over rows of the parameter
gradients are split into fixed blocks of :data:`ROWS_PER_PART` rows, so they never
depend on the launch shape. ``tests/fast/test_fast_cuda.py`` proves each kernel
equal to its reference on a GPU (and compiles the source with ``nvcc`` where it is
installed, so a syntax error shows on a CPU machine first).

The fast twins (``fast/optimizer.py``, ``fast/layernorm.py``, ``fast/attention.py``,
``fast/elementwise.py``, ``fast/clip.py``) ask :func:`usable` and take these kernels on
CuPy arrays; everywhere else (NumPy, the
strict stand-in) nothing here runs and CuPy is never imported. Set
``MINITRANSFORMER_CUDA_KERNELS=0`` to run the CuPy operator chains instead.
"""
from __future__ import annotations

import functools
import os

import numpy as np

__all__ = ["usable", "contiguous", "adam_update", "layernorm_forward", "layernorm_backward", "softmax_rows",
           "softmax_backward_rows", "sum_squares", "scale_by", "gelu_exact"]

ROWS_PER_PART = 64  # rows per partial column sum of a LayerNorm parameter gradient: fixed
# (the CPU's compiled loops sum parts of 256 rows: the two devices' dw, db differ in rounding)
WARPS_PER_BLOCK = 4  # rows per block of the row kernels (one warp of 32 threads a row)
THREADS = 256  # threads per block of the element-wise and column kernels

#: What every kernel source of the fast set starts with (this file's and ``cuda_flat.py``'s): a
#: warp's sum, and Adam's update of one element, which the per-tensor and the chunked kernels share.
DEVICE_HELPERS = r"""
// T is float or double; every sum and intermediate is double. (NVRTC compiles this without
// the C library's headers: no INFINITY, so -inf is spelled by its bits.)
#define NEG_INF __longlong_as_double(0xfff0000000000000ULL)
#define QUIET_NAN __longlong_as_double(0x7ff8000000000000ULL)
__device__ __forceinline__ double warp_sum(double s) {
    for (int offset = 16; offset > 0; offset >>= 1) s += __shfl_xor_sync(0xffffffffu, s, offset);
    return s;  // every lane holds the sum of the warp
}

// theta' - step_size * m_t / (sqrt(v_t * inv_bc2) + eps), with g~ = g + l2 * theta and
// theta' = shrink * theta (l2 = lambda for L2 decay, shrink = 1 - lr lambda for AdamW).
template <typename T>
__device__ __forceinline__ void adam_element(T* p, const T* g, T* m, T* v, const long long i,
                                             const double beta1, const double beta2, const double step_size,
                                             const double inv_bc2, const double eps, const double l2,
                                             const double shrink) {
    const double theta = (double)p[i];
    const double gt = (double)g[i] + l2 * theta;
    const double mt = beta1 * (double)m[i] + (1.0 - beta1) * gt;
    const double vt = beta2 * (double)v[i] + (1.0 - beta2) * gt * gt;
    m[i] = (T)mt;
    v[i] = (T)vt;
    p[i] = (T)(shrink * theta - step_size * mt / (sqrt(vt * inv_bc2) + eps));
}
"""

SOURCE = DEVICE_HELPERS + r"""
// Adam over one tensor of n elements, each by adam_element.
template <typename T>
__global__ void adam_update(T* p, const T* g, T* m, T* v, const long long n,
                            const double beta1, const double beta2, const double step_size,
                            const double inv_bc2, const double eps, const double l2,
                            const double shrink) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        adam_element(p, g, m, v, i, beta1, beta2, step_size, inv_bc2, eps, l2, shrink);
}

// One warp per row of x (N, D): mean, biased variance, rstd, xhat and y.
template <typename T>
__global__ void layernorm_forward(const T* x, const T* w, const T* b, T* y, T* xhat, T* rstd,
                                  const int N, const int D, const double eps) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N) return;  // the whole warp: its lanes share the row
    const long long start = (long long)row * D;
    double s = 0.0;
    for (int d = lane; d < D; d += 32) s += (double)x[start + d];
    const double mu = warp_sum(s) / D;
    double q = 0.0;
    for (int d = lane; d < D; d += 32) {
        const double c = (double)x[start + d] - mu;
        q += c * c;
    }
    const double r = 1.0 / sqrt(warp_sum(q) / D + eps);  // biased variance, eps inside the root
    for (int d = lane; d < D; d += 32) {
        const double h = ((double)x[start + d] - mu) * r;
        xhat[start + d] = (T)h;
        y[start + d] = (T)(h * (double)w[d] + (double)b[d]);
    }
    if (lane == 0) rstd[row] = (T)r;
}

// One warp per row: dx = rstd (g - mean(g) - xhat mean(g xhat)), g = dy * w.
template <typename T>
__global__ void layernorm_backward_dx(const T* dy, const T* xhat, const T* rstd, const T* w, T* dx,
                                      const int N, const int D) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N) return;
    const long long start = (long long)row * D;
    double sg = 0.0, sgx = 0.0;
    for (int d = lane; d < D; d += 32) {
        const double g = (double)dy[start + d] * (double)w[d];
        sg += g;
        sgx += g * (double)xhat[start + d];
    }
    const double g_mean = warp_sum(sg) / D, gx_mean = warp_sum(sgx) / D;
    const double r = (double)rstd[row];
    for (int d = lane; d < D; d += 32) {
        const double g = (double)dy[start + d] * (double)w[d];
        dx[start + d] = (T)((g - g_mean - (double)xhat[start + d] * gx_mean) * r);
    }
}

// Thread (column d, blocks of rows blockIdx.y, blockIdx.y + gridDim.y, ...): the sums of
// dy xhat and dy over each block of rows_per_part rows (grid y is at most 65535 blocks).
template <typename T>
__global__ void layernorm_backward_params(const T* dy, const T* xhat, double* dw_parts,
                                          double* db_parts, const int N, const int D,
                                          const int rows_per_part, const int P) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    for (int part = blockIdx.y; part < P; part += gridDim.y) {
        const long long first = (long long)part * rows_per_part;
        const long long last = min((long long)N, first + rows_per_part);
        double sw = 0.0, sb = 0.0;
        for (long long r = first; r < last; ++r) {
            const double g = (double)dy[r * D + d];
            sw += g * (double)xhat[r * D + d];
            sb += g;
        }
        dw_parts[(long long)part * D + d] = sw;
        db_parts[(long long)part * D + d] = sb;
    }
}

// dw, db (D,) = the sums over the P blocks of rows, in a fixed order.
template <typename T>
__global__ void sum_parts(const double* dw_parts, const double* db_parts, T* dw, T* db,
                          const int P, const int D) {
    const int d = blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= D) return;
    double sw = 0.0, sb = 0.0;
    for (int part = 0; part < P; ++part) {
        sw += dw_parts[(long long)part * D + d];
        sb += db_parts[(long long)part * D + d];
    }
    dw[d] = (T)sw;
    db[d] = (T)sb;
}

// One warp per row of s (N, K), in place: the softmax of the row, exp(-inf) = 0, a row with
// every logit -inf (every key masked) all zeros, and a row with a NaN all NaN (as the
// reference, whose row maximum is then NaN; fmax alone would skip the NaN).
template <typename T>
__global__ void softmax_rows(T* s, const int N, const int K) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N) return;
    T* r = s + (long long)row * K;
    double top = NEG_INF;
    bool nan = false;
    for (int k = lane; k < K; k += 32) {
        const double v = (double)r[k];
        nan = nan || v != v;
        top = fmax(top, v);
    }
    for (int offset = 16; offset > 0; offset >>= 1) top = fmax(top, __shfl_xor_sync(0xffffffffu, top, offset));
    if (__any_sync(0xffffffffu, nan)) {  // the whole warp takes this branch or none of it
        for (int k = lane; k < K; k += 32) r[k] = (T)QUIET_NAN;
        return;
    }
    if (top == NEG_INF) {  // fully masked: zeros, never -inf - -inf = NaN
        for (int k = lane; k < K; k += 32) r[k] = (T)0;
        return;
    }
    double sum = 0.0;
    for (int k = lane; k < K; k += 32) sum += exp((double)r[k] - top);
    const double inv = 1.0 / warp_sum(sum);
    for (int k = lane; k < K; k += 32) r[k] = (T)(exp((double)r[k] - top) * inv);
}

// One warp per row, in place: dp becomes dS = p (dp - sum_k dp p), the gradient of the logits.
template <typename T>
__global__ void softmax_backward_rows(T* dp, const T* p, const int N, const int K) {
    const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= N) return;
    const long long start = (long long)row * K;
    double inner = 0.0;
    for (int k = lane; k < K; k += 32) inner += (double)dp[start + k] * (double)p[start + k];
    inner = warp_sum(inner);
    for (int k = lane; k < K; k += 32) dp[start + k] = (T)((double)p[start + k] * ((double)dp[start + k] - inner));
}

// One block: *out = sum of g^2 over the n entries of one gradient, in a fixed order.
template <typename T>
__global__ void sum_squares(const T* g, const long long n, double* out) {
    __shared__ double warps[32];
    double s = 0.0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) s += (double)g[i] * (double)g[i];
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : 0.0;
        s = warp_sum(s);
        if (threadIdx.x == 0) *out = s;
    }
}

// g *= *scale (a factor that stays on the device).
template <typename T>
__global__ void scale_by(T* g, const long long n, const double* scale) {
    const double c = *scale;
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) g[i] = (T)((double)g[i] * c);
}

// y = x Phi(x), dy/dx = Phi(x) + x phi(x); phi underflows to 0 far out, never overflows.
template <typename T>
__global__ void gelu_exact(const T* x, T* y, T* dydx, const long long n) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const double xi = (double)x[i];
        const double cdf = 0.5 * (1.0 + erf(xi * 0.70710678118654752440));
        const double pdf = 0.39894228040143267794 * exp(-0.5 * xi * xi);
        y[i] = (T)(xi * cdf);
        dydx[i] = (T)(cdf + xi * pdf);
    }
}
"""

KERNELS = ("adam_update", "layernorm_forward", "layernorm_backward_dx", "layernorm_backward_params",
           "sum_parts", "softmax_rows", "softmax_backward_rows", "sum_squares", "scale_by", "gelu_exact")
_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def enabled() -> bool:
    """False when ``MINITRANSFORMER_CUDA_KERNELS=0`` (read at each call: tests switch it)."""
    return os.environ.get("MINITRANSFORMER_CUDA_KERNELS", "1").strip() != "0"


def usable(*arrays) -> bool:
    """True when these kernels can take the arrays: the active backend is CuPy, the
    kernels are enabled, and every array is a CuPy array of one dtype, float32 or
    float64. Never imports CuPy on another backend. (The kernels read C-contiguous
    arrays: the callers pass ``ascontiguousarray`` copies, and write only into arrays
    that :func:`contiguous` accepts.)"""
    from minitransformer import backend  # late: the active backend may change
    if backend.name() != "cupy" or not enabled():
        return False
    import cupy
    dtype = arrays[0].dtype
    return dtype in _CTYPE and all(isinstance(a, cupy.ndarray) and a.dtype == dtype for a in arrays)


def contiguous(*arrays) -> bool:
    """True when every array is C-contiguous (one a kernel may write in place)."""
    return all(a.flags.c_contiguous for a in arrays)


@functools.lru_cache(maxsize=None)
def compiled_module(source: str, kernels: tuple):
    """``source``'s templated ``kernels``, each compiled for float and double (NVRTC, once a process)."""
    import cupy
    names = [f"{k}<{t}>" for k in kernels for t in ("float", "double")]
    return cupy.RawModule(code=source, name_expressions=names)  # NVRTC, its default C++ standard


def kernel_of(source: str, kernels: tuple, name: str, dtype):
    """The kernel ``name`` of ``source`` for arrays of ``dtype`` (float32 or float64)."""
    return compiled_module(source, tuple(kernels)).get_function(f"{name}<{_CTYPE[np.dtype(dtype)]}>")


def _kernel(name: str, dtype):
    return kernel_of(SOURCE, tuple(KERNELS), name, dtype)


def _blocks(n: int, threads: int = THREADS) -> int:
    """Blocks for ``n`` elements, one per element up to a cap (the kernels stride past it)."""
    return max(1, min((n + threads - 1) // threads, 65535))


def adam_update(param, grad, m, v, step, lr, beta1, beta2, eps, weight_decay=0.0, decoupled=False):
    """As :func:`minitransformer.fast.optimizer.adam_update` (in place, returns the same
    arrays), in one launch."""
    n = param.size
    if n:
        import cupy
        grad = cupy.ascontiguousarray(grad)  # (S) read only
        l2 = float(weight_decay) if weight_decay and not decoupled else 0.0
        shrink = 1.0 - lr * weight_decay if weight_decay and decoupled else 1.0
        _kernel("adam_update", param.dtype)(
            (_blocks(n),), (THREADS,),
            (param, grad, m, v, np.int64(n), np.float64(beta1), np.float64(beta2),
             np.float64(lr / (1.0 - beta1 ** step)), np.float64(1.0 / (1.0 - beta2 ** step)),
             np.float64(eps), np.float64(l2), np.float64(shrink)))
    return param, m, v


def _row_grid(N: int) -> tuple:
    return ((N + WARPS_PER_BLOCK - 1) // WARPS_PER_BLOCK,), (32 * WARPS_PER_BLOCK,)


def layernorm_forward(x2, w, b, eps: float):
    """x2: (N, D) C-contiguous. Returns y (N, D), xhat (N, D), rstd (N,)."""
    import cupy
    N, D = x2.shape
    y, xhat = cupy.empty_like(x2), cupy.empty_like(x2)  # (N, D) each
    rstd = cupy.empty(N, dtype=x2.dtype)  # (N,)
    if N and D:
        _kernel("layernorm_forward", x2.dtype)(*_row_grid(N), (x2, w, b, y, xhat, rstd, np.int32(N), np.int32(D),
                                                               np.float64(eps)))
    return y, xhat, rstd


def layernorm_backward(dy2, xhat2, rstd1, w):
    """dy2, xhat2: (N, D), rstd1: (N,), w: (D,), all C-contiguous. Returns dx (N, D), dw, db (D,)."""
    import cupy
    N, D = dy2.shape
    dx = cupy.empty_like(dy2)  # (N, D)
    P = max(1, (N + ROWS_PER_PART - 1) // ROWS_PER_PART)
    alloc = cupy.empty if N else cupy.zeros  # every part is written when there are rows; none: sums of 0
    dw_parts = alloc((P, D), dtype=cupy.float64)  # (P, D)
    db_parts = alloc((P, D), dtype=cupy.float64)  # (P, D)
    dw, db = cupy.empty(D, dtype=w.dtype), cupy.empty(D, dtype=w.dtype)  # (D,) each
    if N and D:
        _kernel("layernorm_backward_dx", dy2.dtype)(*_row_grid(N), (dy2, xhat2, rstd1, w, dx, np.int32(N),
                                                                   np.int32(D)))
        _kernel("layernorm_backward_params", dy2.dtype)(
            ((D + THREADS - 1) // THREADS, min(P, 65535)), (THREADS,),  # grid y: at most 65535 blocks
            (dy2, xhat2, dw_parts, db_parts, np.int32(N), np.int32(D), np.int32(ROWS_PER_PART), np.int32(P)))
    if D:
        _kernel("sum_parts", w.dtype)(((D + THREADS - 1) // THREADS,), (THREADS,),
                                      (dw_parts, db_parts, dw, db, np.int32(P), np.int32(D)))
    return dx, dw, db


def gelu_exact(flat):
    """flat: (n,) C-contiguous. Returns y, dy/dx: (n,) each."""
    import cupy
    y, dydx = cupy.empty_like(flat), cupy.empty_like(flat)  # (n,) each
    if flat.size:
        _kernel("gelu_exact", flat.dtype)((_blocks(flat.size),), (THREADS,), (flat, y, dydx, np.int64(flat.size)))
    return y, dydx


def softmax_rows(s):
    """s: C-contiguous (..., K) logits (masked ones -inf), replaced by their softmax in place."""
    K = s.shape[-1]
    N = s.size // K if K else 0
    if N:
        _kernel("softmax_rows", s.dtype)(*_row_grid(N), (s, np.int32(N), np.int32(K)))
    return s


def softmax_backward_rows(dp, p):
    """dp, p: C-contiguous (..., K). dp, the gradient of the probabilities, is replaced in
    place by dS, the gradient of the logits."""
    K = dp.shape[-1]
    N = dp.size // K if K else 0
    if N:
        _kernel("softmax_backward_rows", dp.dtype)(*_row_grid(N), (dp, p, np.int32(N), np.int32(K)))
    return dp


def sum_squares(g, out):
    """Writes the sum of squares of ``g`` (C-contiguous) into ``out``, a float64 (1,) view."""
    _kernel("sum_squares", g.dtype)((1,), (1024,), (g, np.int64(g.size), out))


def scale_by(g, scale):
    """g *= scale, in place; ``scale`` a float64 0-d device array (never read to the host)."""
    if g.size:
        _kernel("scale_by", g.dtype)((_blocks(g.size),), (THREADS,), (g, np.int64(g.size), scale))
