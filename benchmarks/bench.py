#!/usr/bin/env python
"""Run every benchmark in turn: train_speed.py, decode_speed.py, memory.py, scaling.py
(each in its own process, each writing its own JSON file in benchmarks/results/).

    python benchmarks/bench.py                 # everything (10-15 minutes on 2 cores)
    python benchmarks/bench.py --quick --threads 1

Only the options all four share are passed on; for the others run a script itself.
"""
import argparse
import subprocess
import sys
from pathlib import Path

SCRIPTS = ("train_speed", "decode_speed", "memory", "scaling")
p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
p.add_argument("--only", type=lambda s: s.split(","), default=list(SCRIPTS), help=f"subset of {','.join(SCRIPTS)}")
args, shared = p.parse_known_args()  # --backend, --kernels, --threads, --quick go to every script
failed = [name for name in args.only if subprocess.call(
    [sys.executable, str(Path(__file__).with_name(f"{name}.py"))] + shared) != 0]
sys.exit(f"failed: {', '.join(failed)}" if failed else 0)
