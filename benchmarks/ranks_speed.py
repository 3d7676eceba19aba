#!/usr/bin/env python
"""Whole training commands, one process against the ranks ``--ranks auto`` starts, side by side.

Run from the repository root (needs the [parallel] extra: mpi4py and MPICH)::

    python benchmarks/ranks_speed.py                          # train lm on Tox21, --ranks 1 against 2
    python benchmarks/ranks_speed.py --rounds 3 --epochs 4 --command "train seq2seq"

Each round runs the command once per ``--ranks`` value, in turns (1, 2, then 2, 1 ...),
each in a fresh run folder, as a user starts it (``python -m minitransformer``, BLAS
unpinned): ``--ranks 1`` is one process with every core's BLAS thread, as the command ran
before it started ranks; ``--ranks 2`` two single-thread processes. The figure is the
training throughput the run itself recorded (``history.json``: global tokens per second
of each epoch, the first left out as it includes the start), its median over the epochs,
then over the rounds, with the wall time of the whole command beside it. Writes
``--json`` (default ``ranks_speed.json`` in the current folder) with the machine and BLAS.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from blas_threads import unpin

HERE = Path(__file__).resolve().parent


def one_run(command: list, ranks: int, epochs: int, folder: Path) -> dict:
    """Run the command once; its recorded tokens/s (epochs after the first) and wall time."""
    out = folder / f"r{ranks}-{time.monotonic_ns()}"
    argv = [sys.executable, "-m", "minitransformer", *command, "--ranks", str(ranks), "--epochs", str(epochs),
            "--out", str(out), "--quiet"]
    env = unpin(dict(os.environ))
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "MINITRANSFORMER_THREADS"):
        env.pop(name, None)  # the command chooses each process's threads, as for a user
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=HERE.parent, timeout=3600)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{done.stderr[-2000:]}")
    rows = json.loads((out / "history.json").read_text())
    speeds = [r["tokens_per_s"] for r in rows[1:]] or [rows[-1]["tokens_per_s"]]
    first = done.stdout.splitlines()[0] if done.stdout else ""
    runtime = json.loads((out / "provenance.json").read_text())["versions"]["runtime"]  # what the run itself saw
    return {"ranks": ranks, "tokens_per_s": statistics.median(speeds), "epochs": len(rows), "wall_s": wall,
            "first_line": first, "runtime": runtime}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--command", default="train lm --pretrain-data none --samples 200 --grammar off",
                   help="the command and its options (default: train lm on Tox21, no pretraining)")
    p.add_argument("--ranks", default="1,2", help="the --ranks values compared (default 1,2)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--json", default="ranks_speed.json")
    args = p.parse_args(argv)
    command = args.command.split()
    values = [int(v) for v in args.ranks.split(",")]
    results = {v: [] for v in values}
    with tempfile.TemporaryDirectory(prefix="ranks-speed-") as tmp:
        for r in range(args.rounds):
            order = values if r % 2 == 0 else values[::-1]
            for v in order:
                res = one_run(command, v, args.epochs, Path(tmp))
                results[v].append(res)
                print(f"round {r + 1}/{args.rounds} --ranks {v}: {res['tokens_per_s']:,.0f} tokens/s, "
                      f"{res['wall_s']:.1f} s  [{res['first_line']}]", flush=True)
    base = statistics.median(x["tokens_per_s"] for x in results[values[0]])
    summary = {}
    for v in values:
        speed = statistics.median(x["tokens_per_s"] for x in results[v])
        wall = statistics.median(x["wall_s"] for x in results[v])
        summary[v] = {"tokens_per_s": speed, "ratio": speed / base, "wall_s": wall}
        print(f"--ranks {v}: {speed:,.0f} tokens/s (x{speed / base:.2f} of --ranks {values[0]}), "
              f"command {wall:.1f} s")
    from common import cpu_model
    record = {"command": ["python", "benchmarks/ranks_speed.py", *(argv if argv is not None else sys.argv[1:])],
              "date": time.strftime("%Y-%m-%d"), "machine": {"cpu": cpu_model(), "cores": len(os.sched_getaffinity(0))},
              "runs": {str(k): v for k, v in results.items()}, "summary": {str(k): v for k, v in summary.items()}}
    Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    print(f"results: {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
