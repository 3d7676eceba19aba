#!/usr/bin/env python
"""Data-parallel training speed on this machine: ranks x threads, all-reduce apart.

Run from the repository root (needs the [parallel] extra: mpi4py and MPICH)::

    python benchmarks/data_parallel.py                    # 1x2, 2x1, 2x2 on small, tomczak, medium
    python benchmarks/data_parallel.py --quick            # small only, fewer steps

Each layout R x t is ``mpiexec -n R`` processes with t BLAS threads and a CPU pool
of t each (1 x t runs without mpiexec). Every layout trains on the same global
batch (the config's B x T of train_speed.py), each rank on its shard, with the
trainer's data-parallel step (``minitransformer.distributed``): global token count,
forward, backward, all-reduce of the flat gradient buffer, clipping, AdamW. Reported:
global tokens/s (median step), the all-reduce's share of a step, and its measured
cost per byte and per call.

Then a paper estimate of 8 and 64 ranks: with the local batch kept (each rank does
the work it does here), step time = compute + all-reduce, the all-reduce costed as
a ring, 2 (R - 1) / R x bytes / bandwidth + 2 (R - 1) x latency, once with the
bandwidth and latency measured here between 2 processes on one machine (shared
memory) and once with a 10 Gb/s network (1.1 GB/s, 30 us): the bytes are the
model's gradients in float32.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from blas_threads import unpin, work_env

HERE = Path(__file__).resolve().parent
LAYOUTS = ((1, 2), (2, 1), (2, 2))  # (ranks, threads per rank)
SHAPES = {"small": (64, 64), "tomczak": (64, 64), "medium": (32, 128)}
NETWORK = {"bandwidth_B_per_s": 1.1e9, "latency_s": 30e-6}  # 10 Gb/s Ethernet, for the estimate


def worker(config: str, steps: int, warmup: int) -> None:
    """One rank of one layout: time the data-parallel steps; rank 0 prints JSON."""
    sys.path.insert(0, str(HERE))
    import numpy as np
    from common import make_batch, make_config
    from minitransformer import distributed
    from minitransformer.models import DecoderLM
    from minitransformer.optim import AdamW, clip_grad_norm
    from minitransformer.train.tasks import LMTask

    dp = distributed.DataParallel() if distributed.world_size() > 1 else None
    B, T = SHAPES[config]
    cfg = make_config(config, T)
    model, task = DecoderLM(cfg), LMTask(cfg.pad_id)
    optimizer = AdamW(model, lr=1e-3)
    batch = np.asarray(make_batch(B, T, cfg))  # (B, T + 1) host ids: the global batch
    local = batch if dp is None else batch[dp.shard(np.arange(B))]

    def step():
        task.normaliser = task.scored_tokens(batch)  # known on every rank: the whole batch is here
        model.zero_grad()
        task.loss(model, local)
        task.backward(model)
        if dp is not None:
            dp.allreduce_gradients(model)
        clip_grad_norm(model, 1.0)
        optimizer.step()

    for _ in range(warmup):
        step()
    times, reduce_times = [], []
    for _ in range(steps):
        if dp is not None:
            dp.barrier()
            before = dp.allreduce_seconds
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        reduce_times.append(0.0 if dp is None else dp.allreduce_seconds - before)
    n_params = sum(int(p.data.size) for _, p in model.named_parameters())
    probe = {}
    if dp is not None:  # the all-reduce alone: a tiny message (latency) and the gradients' size
        for name, size in (("latency", 1), ("gradients", n_params)):
            buf = np.ones(size, dtype=np.float32)
            dp.barrier()
            t0 = time.perf_counter()
            for _ in range(20):
                dp.comm.Allreduce(dp.MPI.IN_PLACE, buf, op=dp.MPI.SUM)
            probe[name] = (time.perf_counter() - t0) / 20
    if dp is None or dp.is_writer:
        print(json.dumps({"times": times, "allreduce": reduce_times, "params": n_params, "probe": probe,
                          "tokens": B * T}))


def run_layout(ranks: int, threads: int, config: str, args) -> dict:
    env = unpin(dict(os.environ), getattr(args, "pinned", False))  # a user's machine has no BLAS pin
    for var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "MINITRANSFORMER_THREADS"):
        env[var] = str(threads)
    work_env(env, "train")  # OpenBLAS's idle-thread timeout for training, unless set
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", config, str(args.steps), str(args.warmup)]
    if ranks > 1:
        cmd = [args.mpiexec, "-n", str(ranks), *cmd]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
    r = json.loads(done.stdout.strip().splitlines()[-1])
    step = statistics.median(r["times"])
    reduce = statistics.median(r["allreduce"])
    return {"config": config, "ranks": ranks, "threads": threads, "step_s": step, "allreduce_s": reduce,
            "tokens_per_s": r["tokens"] / step, "params": r["params"], "probe": r["probe"],
            "times": r["times"], "allreduce_times": r["allreduce"]}


def ring_seconds(ranks: int, n_bytes: float, bandwidth: float, latency: float) -> float:
    """A ring all-reduce: 2 (R - 1) steps, each sending 1/R of the buffer."""
    return 2 * (ranks - 1) / ranks * n_bytes / bandwidth + 2 * (ranks - 1) * latency


def estimate(rows: list[dict]) -> list[dict]:
    """8 and 64 ranks, local batch kept, from the 2 x 1 layout's compute time and all-reduce probe."""
    out = []
    for row in rows:
        if row["ranks"] != 2 or row["threads"] != 1 or not row["probe"]:
            continue
        n_bytes = 4 * row["params"]
        latency = row["probe"]["latency"] / 2  # 2 ranks: a ring of 2 (R - 1) = 2 steps
        bandwidth = n_bytes / max(row["probe"]["gradients"] - 2 * latency, 1e-9)  # (2 - 1)/2 * 2 = 1 buffer
        compute = row["step_s"] - row["allreduce_s"]
        for where, bw, lat in (("this machine's shared memory", bandwidth, latency),
                               ("10 Gb/s network", NETWORK["bandwidth_B_per_s"], NETWORK["latency_s"])):
            for R in (8, 64):
                reduce = ring_seconds(R, n_bytes, bw, lat)
                out.append({"config": row["config"], "ranks": R, "link": where, "bandwidth_GB_s": bw / 1e9,
                            "latency_us": lat * 1e6, "allreduce_s": reduce, "compute_s": compute,
                            "efficiency": compute / (compute + reduce),
                            "tokens_per_s": R / 2 * row["tokens_per_s"] * row["step_s"] / (compute + reduce)})
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", default=None, help="comma-separated subset of small,tomczak,medium")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="small only, 4 steps after 1")
    p.add_argument("--json", type=Path, default=None)
    p.add_argument("--pinned", action="store_true",
                   help="keep the machine's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the ranks (default: dropped)")
    args = p.parse_args()
    args.configs = (args.configs or ("small" if args.quick else ",".join(SHAPES))).split(",")
    if set(args.configs) - set(SHAPES):
        p.error(f"unknown config(s) {sorted(set(args.configs) - set(SHAPES))}; choose from {list(SHAPES)}")
    if args.quick:
        args.steps, args.warmup = 4, 1
    args.mpiexec = shutil.which("mpiexec") or shutil.which("mpiexec", path=str(Path(sys.executable).parent))
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        p.error("needs mpi4py: pip install 'minitransformer[parallel]'")
    if args.mpiexec is None:
        p.error("no mpiexec on PATH or beside this Python: pip install mpich")
    rows = []
    for config in args.configs:
        for ranks, threads in LAYOUTS:
            row = run_layout(ranks, threads, config, args)
            rows.append(row)
            print(f"{config:8s} {ranks} x {threads}: {row['tokens_per_s']:9,.0f} tok/s, step {row['step_s'] * 1e3:7.1f} ms"
                  f", all-reduce {row['allreduce_s'] * 1e3:6.2f} ms", flush=True)
    est = estimate(rows)
    print("\nestimate, local batch kept:")
    for e in est:
        print(f"  {e['config']:8s} {e['ranks']:3d} ranks over {e['link']}: all-reduce {e['allreduce_s'] * 1e3:7.2f} ms "
              f"against {e['compute_s'] * 1e3:7.1f} ms of compute, efficiency {e['efficiency']:.2f}")
    sys.path.insert(0, str(HERE))
    from common import default_path
    from minitransformer.atomic import write_json
    path = args.json or default_path("data_parallel")
    write_json(path, {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "cpus": os.cpu_count(),
                      "load_average_end": os.getloadavg(), "rows": rows, "estimate": est, "network": NETWORK})
    print(f"wrote {path}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
