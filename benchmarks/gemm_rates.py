"""GFLOP/s of single matrix products, for ``against_torch.py --tasks gemms``: plain
Python, so both sides (NumPy here, torch in ``torch_eager.py``) time them alike."""
from __future__ import annotations

import time

GEMM_SHAPES = ((4096, 256, 768), (4096, 256, 1024), (4096, 1024, 256), (4096, 64, 256), (4096, 256, 64))


def gemm_rates(matmul, rand, reps: int = 30) -> list:
    """GFLOP/s of (M, K) @ (K, N) for each of GEMM_SHAPES (median of ``reps``)."""
    rates = []
    for M, K, N in GEMM_SHAPES:
        a, b = rand(M, K), rand(K, N)
        times = []
        for i in range(reps + 3):
            t0 = time.perf_counter()
            matmul(a, b)
            if i >= 3:
                times.append(time.perf_counter() - t0)
        rates.append(2 * M * K * N / sorted(times)[len(times) // 2] / 1e9)
    return rates
