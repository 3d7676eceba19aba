#!/usr/bin/env bash
# Issue 29, first part: the GPU tests and our training speed on CuPy. Run from the repo root;
# writes under $OUT (default ./gpu-out).
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD
{ nvidia-smi -L; python -c "import cupy, numpy; print('cupy', cupy.__version__, 'numpy', numpy.__version__)"; } 2>&1 | tee "$OUT/device.txt"
timeout 300 python -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py 2>&1 | tail -30 | tee "$OUT/gpu_tests.txt"
timeout 200 python benchmarks/gpu/speed.py cupy 2>&1 | tail -5 | tee "$OUT/speed.json"
