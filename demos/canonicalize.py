#!/usr/bin/env python3
"""Translate any SMILES into RDKit's canonical SMILES with an encoder-decoder transformer.

    python demos/canonicalize.py --quick              # the same as: minitransformer train seq2seq --quick
    python demos/canonicalize.py --help

This script is the command ``minitransformer train seq2seq`` run from a checkout
without installing anything; every option is the command's. The flow, top to
bottom, is in :mod:`minitransformer.cli.train_seq2seq`.

    python demos/canonicalize.py translate runs/seq2seq/best.npz 'OCC(C)c1ccccc1'
"""
import os
import sys
from pathlib import Path

# Before NumPy loads: idle OpenBLAS threads sleep at once, so the library's compiled
# loops get the cores; a demo's time is mostly training (minitransformer/fast/engine/parallel.py).
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "8")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main(argv=None) -> int:
    """Run ``minitransformer train seq2seq ARGV`` (``translate ...``: ``minitransformer translate ...``); returns the exit status."""
    from minitransformer.cli.main import main as command
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["translate"]:
        return command(argv)
    return command(["train", "seq2seq", *argv])


if __name__ == "__main__":
    from minitransformer.cli.main import console
    console(["train", "seq2seq", *sys.argv[1:]] if sys.argv[1:2] != ["translate"] else sys.argv[1:])
