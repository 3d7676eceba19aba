#!/usr/bin/env python3
"""Generate molecules with a decoder-only transformer trained on SMILES.

    python demos/molecules.py --quick                 # the same as: minitransformer train lm --quick
    python demos/molecules.py --help

This script is the command ``minitransformer train lm`` run from a checkout
without installing anything; every option is the command's. The flow, top to
bottom, is in :mod:`minitransformer.cli.train_lm`.

    python demos/molecules.py sample runs/lm/best.npz -n 100   # minitransformer sample ...
"""
import os
import sys
from pathlib import Path

# Before NumPy loads: idle OpenBLAS threads sleep at once, so the library's compiled
# loops get the cores; a demo's time is mostly training (minitransformer/fast/engine/parallel.py).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "8")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main(argv=None) -> int:
    """Run ``minitransformer train lm ARGV`` (``sample ...``: ``minitransformer sample ...``); returns the exit status."""
    from minitransformer.cli.main import main as command
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sample"]:
        return command(argv)
    return command(["train", "lm", *argv])


if __name__ == "__main__":
    from minitransformer.cli.main import console
    console(["train", "lm", *sys.argv[1:]] if sys.argv[1:2] != ["sample"] else sys.argv[1:])
