r"""GPU kernels over a flat layout (:mod:`minitransformer.fast.engine.flat`): one launch for all tensors.

Where :mod:`minitransformer.fast.engine.cuda` launches its Adam and its clipping's sum of squares
once per tensor, these take every tensor of an optimizer at once, the tensors being
segments of flat buffers. A segment is cut into *chunks* of at most :data:`CHUNK`
elements, one CUDA block each; a table made once per layout (:class:`Chunks`, on the
device) says which segment and which elements a chunk holds, so a block finds its
segment's settings by one read:

==========================  ===========================================================
kernel                      one launch does
==========================  ===========================================================
``adam_chunks``             :math:`m_t, v_t, \theta_t` of every segment, in place, each
                            with its own step size, bias correction and decay
``sum_squares_chunks``      the sum of squares of every chunk of the gradients, into one
                            float64 slot a chunk (their sum, in a fixed order, is the
                            squared global norm)
==========================  ===========================================================

The math per element is that of ``adam_update`` in :mod:`minitransformer.fast.engine.cuda`
(itself the reference's), with every intermediate in float64. The settings of each
segment (step size :math:`\eta/(1-\beta_1^t)`, :math:`1/(1-\beta_2^t)`, the L2 term and
the AdamW shrink) are formed on the host, where the step counts live, and sent as one
small (S, 4) copy per step: one transfer where there were S launches.
``tests/fast/test_fast_cuda.py`` compiles the source with ``nvcc`` and NVRTC on a
CPU machine and proves both kernels equal to their references on a GPU.
"""
from __future__ import annotations

import numpy as np

from minitransformer.fast.engine import cuda

__all__ = ["CHUNK", "Chunks", "adam_flat", "sum_squares_flat"]

CHUNK = 8192  # elements a chunk: one block of cuda.THREADS threads, 32 elements a thread

SOURCE = cuda.DEVICE_HELPERS + r"""

// Block c updates elements [begin[c], end[c]) of segment seg[c]; settings[4 s + k] are
// segment s's step size, 1 / (1 - beta2^t), L2 coefficient and AdamW shrink.
template <typename T>
__global__ void adam_chunks(T* p, const T* g, T* m, T* v, const int* seg, const long long* begin,
                            const long long* end, const double* settings, const double beta1,
                            const double beta2, const double eps) {
    const int c = blockIdx.x;
    const double* s = settings + 4 * (long long)seg[c];
    const double step_size = s[0], inv_bc2 = s[1], l2 = s[2], shrink = s[3];
    const long long first = begin[c], last = end[c];
    for (long long i = first + threadIdx.x; i < last; i += blockDim.x)
        adam_element(p, g, m, v, i, beta1, beta2, step_size, inv_bc2, eps, l2, shrink);
}

// Block c: out[c] = the sum of g^2 over [begin[c], end[c]), in a fixed order.
template <typename T>
__global__ void sum_squares_chunks(const T* g, const long long* begin, const long long* end, double* out) {
    __shared__ double warps[32];
    const int c = blockIdx.x;
    const long long first = begin[c], last = end[c];
    double s = 0.0;
    for (long long i = first + threadIdx.x; i < last; i += blockDim.x) s += (double)g[i] * (double)g[i];
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? warps[threadIdx.x] : 0.0;
        s = warp_sum(s);
        if (threadIdx.x == 0) out[c] = s;
    }
}
"""

KERNELS = ("adam_chunks", "sum_squares_chunks")
assert cuda.THREADS % 32 == 0 and cuda.THREADS <= 1024, "sum_squares_chunks: whole warps, at most 32 of them"


def chunk_table(offsets, sizes, chunk: int = CHUNK):
    """Host arrays (seg, begin, end), one entry a chunk: each segment's elements cut into
    runs of at most ``chunk``; an empty segment has none."""
    seg, begin, end = [], [], []
    for s, (o, n) in enumerate(zip(offsets, sizes)):
        for start in range(o, o + n, chunk):
            seg.append(s)
            begin.append(start)
            end.append(min(start + chunk, o + n))
    return (np.asarray(seg, dtype=np.int32), np.asarray(begin, dtype=np.int64),  # (C,) each
            np.asarray(end, dtype=np.int64))


class Chunks:
    """A layout's chunk table on the device, and a (S, 4) float64 buffer for the settings."""

    def __init__(self, layout):
        import cupy
        seg, begin, end = chunk_table(layout.offsets, layout.sizes)
        self.count = len(seg)
        self.seg, self.begin, self.end = (cupy.asarray(a) for a in (seg, begin, end))  # (C,) each
        self.settings = cupy.zeros((len(layout.sizes), 4), dtype=cupy.float64)      # (S, 4)
        self.partial = cupy.zeros(max(self.count, 1), dtype=cupy.float64)           # (C,) sums of squares


def _kernel(name: str, dtype):
    return cuda.kernel_of(SOURCE, tuple(KERNELS), name, dtype)


def chunks_of(layout) -> Chunks:
    """The layout's device table, made on first use and kept with it."""
    table = getattr(layout, "chunks", None)
    if table is None:
        table = layout.chunks = Chunks(layout)
    return table


def adam_flat(layout, settings, beta1: float, beta2: float, eps: float) -> None:
    r"""One Adam step of every segment of ``layout`` (its ``data``, ``grad``, ``state["m"]``,
    ``state["v"]``), in place, in one launch. ``settings``: a host (S, 4) float64 array,
    per segment the step size, :math:`1/(1-\beta_2^t)`, the L2 coefficient and the shrink."""
    table = chunks_of(layout)
    if not table.count:
        return
    table.settings.set(np.ascontiguousarray(settings, dtype=np.float64))  # one host-to-device copy
    _kernel("adam_chunks", layout.data.dtype)(
        (table.count,), (cuda.THREADS,),
        (layout.data, layout.grad, layout.state["m"], layout.state["v"], table.seg, table.begin, table.end,
         table.settings, np.float64(beta1), np.float64(beta2), np.float64(eps)))


def sum_squares_flat(layout):
    """The sum of squares of every gradient of ``layout``, a float64 0-d device array: one
    launch for the chunks' sums, one for their sum (fixed order, so the same every run)."""
    table = chunks_of(layout)
    if not table.count:
        import cupy
        return cupy.zeros((), dtype=cupy.float64)  # () no element: zero
    _kernel("sum_squares_chunks", layout.grad.dtype)(
        (table.count,), (cuda.THREADS,), (layout.grad, table.begin, table.end, table.partial))
    return table.partial[:table.count].sum()  # ()
