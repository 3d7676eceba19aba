#!/usr/bin/env python3
"""Predict the 12 Tox21 toxicity assays from SMILES with a transformer encoder.

    python demos/tox21_property.py --quick            # the same as: minitransformer train property --quick
    python demos/tox21_property.py --help

This script is the command ``minitransformer train property`` run from a checkout
without installing anything; every option is the command's. The flow, top to
bottom, is in :mod:`minitransformer.cli.train_property`.
"""
import os
import sys
from pathlib import Path

# Before NumPy loads: idle OpenBLAS threads sleep at once, so the library's compiled
# loops get the cores; a demo's time is mostly training (minitransformer/fast/engine/parallel.py).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "8")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main(argv=None) -> int:
    """Run ``minitransformer train property ARGV``; returns the exit status."""
    from minitransformer.cli.main import main as command
    argv = list(sys.argv[1:] if argv is None else argv)
    return command(["train", "property", *argv])


if __name__ == "__main__":
    from minitransformer.cli.main import console
    console(["train", "property", *sys.argv[1:]])
