"""How long FCD takes: ChemNet's activations for N molecules, in NumPy (ours) and, if asked, in
fcd_torch (PyTorch) on the same molecules in the same run.

Run from the repository root::

    python benchmarks/fcd_speed.py                       # 10,000 MOSES test molecules, 2 threads
    python benchmarks/fcd_speed.py --torch-python /path/to/torch-venv/bin/python   # and fcd_torch beside it
    python benchmarks/fcd_speed.py --quick               # 1,000 molecules

The molecules are drawn at random (seed 0) from MOSES's ``test`` file (or Tox21 when
MOSES is not on this machine). Timed: RDKit canonicalization, then ChemNet's forward
pass over all of them (batches of 512), then the statistics and the distance against
the set's first half; each side runs in a fresh process, in alternating order, and
the median over ``--repeats`` rounds is reported. The goal is 10,000
molecules in under 60 s on 2 cores.

Like every measured run of this project, the processes run without the machine's
OpenBLAS pin (``OPENBLAS_CORETYPE``, ``OPENBLAS_L2_SIZE`` are removed from their
environment, as a user's machine has none), and the JSON names the CPU and the BLAS
kernel that ran (threadpoolctl, when installed).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PINS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def molecules(n: int) -> list:
    sys.path.insert(0, str(ROOT))
    import numpy as np
    try:
        from minitransformer.chem.datasets.moses import load_moses
        pool = load_moses("test", download=False)
    except (OSError, ValueError):
        from minitransformer.chem.datasets.data import load_source
        pool = load_source("tox21").smiles
    pick = np.sort(np.random.default_rng(0).permutation(len(pool))[:n])
    return [pool[i] for i in pick]


def blas_kernels() -> list:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return ["threadpoolctl not installed"]
    return [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
            for d in threadpool_info()]


def ours(n: int) -> dict:
    """Our side, in this process."""
    sys.path.insert(0, str(ROOT))
    from minitransformer.chem._rdkit import parse_valid
    from minitransformer.chem.frechet.fcd import FCDStatistics, default_chemnet, frechet_distance
    import numpy as np
    mols = molecules(n)
    net = default_chemnet()
    t0 = time.perf_counter()
    canon = parse_valid(mols)[1]
    t1 = time.perf_counter()
    acts = net.activations(canon).astype(np.float64)
    t2 = time.perf_counter()
    half = len(acts) // 2
    a, b = acts[:half], acts[half:]
    d = frechet_distance(FCDStatistics(a.mean(0), np.cov(a, rowvar=False), half),
                         FCDStatistics(b.mean(0), np.cov(b, rowvar=False), len(b)))
    t3 = time.perf_counter()
    return {"side": "ours", "n": len(canon), "canonicalize_s": t1 - t0, "chemnet_s": t2 - t1,
            "distance_s": t3 - t2, "total_s": t3 - t0, "fcd_halves": d, "blas": blas_kernels()}


TORCH_WORKER = r"""
import json, sys, time, numpy as np, torch
from fcd_torch import FCD
from fcd_torch.utils import calculate_frechet_distance
torch.set_num_threads(int(sys.argv[1]))
mols = json.loads(sys.stdin.read())
f = FCD(device="cpu", n_jobs=1, batch_size=512)
t0 = time.perf_counter()
acts = f.get_predictions(mols)  # canonicalizes inside
t2 = time.perf_counter()
half = len(acts) // 2
a, b = acts[:half], acts[half:]
d = calculate_frechet_distance(a.mean(0), np.cov(a.T), b.mean(0), np.cov(b.T))
t3 = time.perf_counter()
print(json.dumps({"side": "fcd_torch", "n": len(acts), "chemnet_s": t2 - t0, "distance_s": t3 - t2,
                  "total_s": t3 - t0, "fcd_halves": float(d), "torch": torch.__version__}))
"""


def run_side(side: str, args) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in PINS}
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        env[var] = str(args.threads)
    env.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")
    if side == "ours":
        cmd = [sys.executable, __file__, "--worker", "--n", str(args.n)]
        done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    else:
        payload = json.dumps(molecules(args.n))
        done = subprocess.run([args.torch_python, "-c", TORCH_WORKER, str(args.threads)], input=payload,
                              capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{side} worker failed: {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=None, help="molecules (default 10,000; --quick: 1,000)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--torch-python", default=None, help="the Python of an environment with torch and fcd_torch")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.n = args.n or (1000 if args.quick else 10_000)
    if args.worker:
        print(json.dumps(ours(args.n)))
        return 0
    sides = ["ours"] + (["fcd_torch"] if args.torch_python else [])
    runs = {side: [] for side in sides}
    for r in range(1 if args.quick else args.repeats):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            runs[side].append(run_side(side, args))
            print(f"round {r + 1}: {side} {runs[side][-1]['total_s']:.1f} s", flush=True)
    sys.path.insert(0, str(HERE))
    from common import cpu_model
    summary = {side: {key: statistics.median(x[key] for x in rs) for key in ("chemnet_s", "total_s")}
               for side, rs in runs.items()}
    for side, s in summary.items():
        print(f"{side:10s} {args.n:,} molecules: ChemNet {s['chemnet_s']:.1f} s, all {s['total_s']:.1f} s "
              f"({args.n / s['total_s']:.0f} molecules/s)")
    if "fcd_torch" in runs:
        print(f"FCD of the two halves: ours {runs['ours'][0]['fcd_halves']:.6f}, "
              f"fcd_torch {runs['fcd_torch'][0]['fcd_halves']:.6f}")
    result = {"benchmark": "fcd_speed", "command": " ".join(["python", "benchmarks/fcd_speed.py"] + sys.argv[1:]),
              "cpu_model": cpu_model(), "threads": args.threads, "load_average": os.getloadavg(),
              "unset_pins": list(PINS), "median": summary, "runs": runs}
    path = args.json or HERE / "results" / f"fcd_speed-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
