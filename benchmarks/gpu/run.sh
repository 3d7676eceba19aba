#!/usr/bin/env bash
# The GPU device run: run from the repository root on the GPU machine; writes under $OUT
# (default ./gpu-out). The parts and what they measure: benchmarks/gpu/device_run.py. Its dry
# run on any CPU: python benchmarks/gpu/device_run.py --backend strict --quick --out out
set -u
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # after it: wheels brought along (RDKit)
nvidia-smi -L 2>&1 | tee "$OUT/device.txt"
timeout 540 python3 benchmarks/gpu/device_run.py --backend cupy --out "$OUT" "$@" 2>&1 | tail -60
