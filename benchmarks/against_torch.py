"""minitransformer against PyTorch eager on the CPU, side by side in one run.

Run from the repository root, with the Python of a separate environment that has
torch (torch is never a dependency of the package or its tests)::

    python benchmarks/against_torch.py --torch-python /path/to/torch-venv/bin/python
    python benchmarks/against_torch.py --torch-python ... --quick      # small only, 2 rounds
    python benchmarks/against_torch.py --torch-python ... --tasks train --threads 1 --processes 2

Three measurements per config (``small`` 64x64, ``tomczak`` 64x64, ``medium`` 32x128):

``train``
    tokens/s of a whole training step (``common.train_step`` with AdamW against
    ``torch_eager.py``'s step with ``torch.optim.AdamW``), float32.
``memory``
    each training process's peak resident memory (``ru_maxrss``) less its resident
    memory before the model is built, after the imports and one training step of a
    tiny model (D = 8, one layer), which loads each side's runtime once: Numba's
    compiled code and LLVM on ours, torch's thread pools and allocator on theirs.
    So it counts parameters, gradients, optimizer state, activations and whatever
    the library keeps around. The JSON also keeps the peak less the resident memory
    after the imports alone (``peak_mb_from_imports``), runtime included.
``sample``
    new tokens/s of sampling 64 sequences x 64 new tokens with the KV cache.
``gemms`` (only when asked: ``--tasks gemms``)
    GFLOP/s of single float32 products of the models' shapes, NumPy's BLAS
    against torch's, in the same two environments.

**Torch at its best.** Torch's matrix products are MKL's. On an AMD CPU, MKL does not
take its AVX-512 code path (it asks ``mkl_serv_intel_cpu_true()`` whether the CPU is
Intel's), and torch's step is about 1.6x slower than it could be. The well-known
workaround is a one-line C library defining that function to return 1, preloaded
(``LD_PRELOAD``) into torch's process. On an AMD CPU this script builds it with ``cc``
(:func:`mkl_stub`) and measures a third side, ``torch-best``, torch with the stub; every
ratio is then judged against the faster torch side (``--torch-sides installed`` skips it).
The JSON records each side's BLAS (torch's ``BLAS_INFO``, the CPU capability its own
kernels use, the preload) and NumPy's (``threadpoolctl``).

Every measurement is a fresh process; each round runs every (config, side) pair
once, the sides in turns (the order reversed every other round), and the median over rounds of each
process's median step is reported, with ours/torch. Both sides get the same
threads (``--threads``, default 2: BLAS, OpenMP and ``torch.set_num_threads``).
The JSON (``--json``, default a new file in ``benchmarks/results/``) keeps every
process's step times.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SHAPES = {"small": (64, 64), "tomczak": (64, 64), "medium": (32, 128)}
TASKS = ("train", "sample", "gemms")


def our_worker(task: str, config: str, B: int, T: int, steps: int, warmup: int) -> dict:
    """Our side of one measurement, in this (fresh) process."""
    if task == "gemms":
        import numpy as np
        sys.path.insert(0, str(HERE))
        from gemm_rates import GEMM_SHAPES, gemm_rates
        rng = np.random.default_rng(0)
        return {"side": "ours", "shapes": GEMM_SHAPES,
                "gflops": gemm_rates(np.matmul, lambda m, n: rng.random((m, n), dtype=np.float32))}
    from common import SAMPLE_BATCH, SAMPLE_MAX_LEN, make_batch, make_config, sampling_model, train_step
    from minitransformer.generate import sample
    from minitransformer.models import DecoderLM
    from minitransformer.optim import AdamW

    imported = _rss_mb()
    _tiny_step()
    base = _rss_mb()
    if task == "train":
        cfg = make_config(config, T)
        model = DecoderLM(cfg)
        optimizer = AdamW(model, lr=1e-3)
        ids = make_batch(B, T, cfg)

        def fn():
            train_step(model, optimizer, ids)
    else:
        model = sampling_model(config)  # EOS never drawn: every call makes 64 x 64 tokens

        def fn():
            sample(model, batch_size=SAMPLE_BATCH, max_len=SAMPLE_MAX_LEN, rng=0, use_cache=True)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    from minitransformer import kernels, runtime
    return {"side": "ours", "kernels": kernels.name(), "runtime": runtime.describe(), "times": times,
            "imported_rss_mb": imported,
            "base_rss_mb": base, "peak_rss_mb": peak}


def _tiny_step():
    """One training step of a D = 8, one-layer model: loads the runtime (compiled loops)."""
    from common import make_batch, train_step
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.optim import AdamW
    cfg = DecoderLMConfig(vocab_size=112, max_len=8, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                          norm="pre", activation="gelu")
    model = DecoderLM(cfg)
    train_step(model, AdamW(model, lr=1e-3), make_batch(4, 7, cfg))


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def thread_env(threads: int, task: str = "train") -> dict:
    """The workers' environment: ``threads`` BLAS threads, OpenBLAS's idle-thread timeout of
    the task (training's, or decoding's for ``sample``), the BLAS pins dropped unless ``--pinned``."""
    from blas_threads import pinned_from_argv, unpin, work_env
    env = unpin(dict(os.environ), pinned_from_argv(sys.argv))
    for name in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
        env[name] = str(threads)
    return work_env(env, "decode" if task == "sample" else "train")


MKL_STUB_C = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"


def mkl_stub(folder: Path) -> Path:
    """Build the one-function library that tells MKL the CPU is Intel's (module docstring)."""
    source, library = folder / "mkl_stub.c", folder / "libmkl_stub.so"
    source.write_text(MKL_STUB_C)
    done = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(library), str(source)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: could not build the MKL stub with cc ({done.stderr.strip()[-300:]}); "
                         "install a C compiler or pass --torch-sides installed")
    return library


def torch_sides(args, folder: Path) -> dict:
    """{side name: extra environment} of the torch sides to measure (module docstring)."""
    sides = {"torch": {}}
    from common import cpuinfo
    if args.torch_sides == "both" and "AMD" in (cpuinfo("vendor_id") or ""):
        sides["torch-best"] = {"LD_PRELOAD": str(mkl_stub(folder))}
    return sides


def run_process(side: str, args, task: str, config: str) -> dict:
    """One measurement of one side: a fresh worker process, or for ``train`` with
    ``--processes N`` N workers at once, each with B / N sequences and ``--threads``
    threads (data-parallel training without its gradient all-reduce, on both sides
    alike: an upper bound of that mode, whose all-reduce ``data_parallel.py``
    measures). The step of N workers is their slowest median step, for all B x T tokens."""
    n = args.processes if task == "train" else 1
    B, T = SHAPES[config] if task == "train" else (64, 64)
    common = ["--task", task, "--config", config, "--B", str(B // n), "--T", str(T),
              "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    env = thread_env(args.threads, task)
    if side.startswith("torch"):
        cmd = [args.torch_python, str(HERE / "torch_eager.py"), *common]
        env.update(args.torch_env[side])
    else:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *common]
    workers = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for _ in range(n)]
    results = []
    for worker in workers:
        out, err = worker.communicate()
        if worker.returncode != 0:
            raise SystemExit(f"error: the {side} worker failed ({' '.join(cmd)}):\n{err.strip()[-2000:]}")
        result = json.loads(out.strip().splitlines()[-1])
        if "times" in result:
            result["median_s"] = statistics.median(result["times"])
        results.append(result)
    result = results[0]
    if n > 1:
        result["median_s"] = max(r["median_s"] for r in results)
        result["processes"] = [{"median_s": r["median_s"], "times": r["times"]} for r in results]
    result["side"] = side
    return result


def summarise(runs: list, task: str, config: str) -> dict:
    """Medians per side; ``torch`` in the row is the faster torch side, named in ``torch_side``,
    and ``speed_ratio`` is ours against it (``speed_ratio_installed``: against torch as installed)."""
    B, T = SHAPES[config] if task == "train" else (64, 64)
    tokens = B * T
    row = {"task": task, "config": config, "B": B, "T": T, "sides": {}}
    for side in dict.fromkeys(r["side"] for r in runs):
        mine = [r for r in runs if r["side"] == side]
        med = statistics.median(r["median_s"] for r in mine)
        row["sides"][side] = {
            "median_s": med, "tokens_per_s": tokens / med,
            "peak_mb": statistics.median(r["peak_rss_mb"] - r["base_rss_mb"] for r in mine),
            "peak_mb_from_imports": statistics.median(r["peak_rss_mb"] - r["imported_rss_mb"] for r in mine),
            "process_medians_s": [r["median_s"] for r in mine], "runtime": mine[0].get("runtime")}
    row["ours"] = row["sides"]["ours"]
    row["torch_side"] = max((s for s in row["sides"] if s.startswith("torch")),
                            key=lambda s: row["sides"][s]["tokens_per_s"])
    row["torch"] = row["sides"][row["torch_side"]]
    row["speed_ratio"] = row["ours"]["tokens_per_s"] / row["torch"]["tokens_per_s"]
    row["speed_ratio_installed"] = row["ours"]["tokens_per_s"] / row["sides"]["torch"]["tokens_per_s"]
    row["memory_ratio"] = row["ours"]["peak_mb"] / row["torch"]["peak_mb"]
    return row


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--torch-python", default=os.environ.get("MINITRANSFORMER_TORCH_PYTHON"),
                   help="Python of an environment with torch (or $MINITRANSFORMER_TORCH_PYTHON)")
    p.add_argument("--configs", default=None, help="comma-separated subset of small,tomczak,medium")
    p.add_argument("--tasks", default="train,sample", help="train, sample or both (default both)")
    p.add_argument("--rounds", type=int, default=5, help="fresh processes per (config, side) (default 5)")
    p.add_argument("--steps", type=int, default=10, help="timed steps per process (default 10)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (default 3)")
    p.add_argument("--threads", type=int, default=2, help="threads of each process (default 2)")
    p.add_argument("--processes", type=int, default=1,
                   help="train in N processes at once, B / N sequences each (default 1; see run_process)")
    p.add_argument("--pinned", action="store_true",
                   help="keep the machine's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the workers (default: dropped)")
    p.add_argument("--torch-sides", choices=("both", "installed"), default="both",
                   help="both (default): on an AMD CPU also torch with MKL's AVX-512 path forced; "
                        "installed: torch as installed only")
    p.add_argument("--quick", action="store_true", help="small only, 2 rounds of 3 steps")
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not args.torch_python:
        p.error("no torch Python: pass --torch-python PATH (a venv with torch) or set MINITRANSFORMER_TORCH_PYTHON")
    if not Path(args.torch_python).exists():
        p.error(f"--torch-python {args.torch_python} does not exist: give the python of a venv with torch")
    args.configs = (args.configs or ("small" if args.quick else "small,tomczak,medium")).split(",")
    unknown = sorted(set(args.configs) - set(SHAPES))
    if unknown:
        p.error(f"unknown config(s) {unknown}; choose from {list(SHAPES)}")
    args.tasks = args.tasks.split(",")
    if set(args.tasks) - set(TASKS):
        p.error(f"--tasks takes train, sample or both, got {args.tasks}")
    if args.processes < 1 or any(SHAPES[c][0] % args.processes for c in args.configs):
        p.error(f"--processes {args.processes}: need a positive number that divides every config's batch "
                f"({', '.join(f'{c} {SHAPES[c][0]}' for c in args.configs)})")
    if args.quick:
        args.rounds, args.steps, args.warmup = 2, 3, 1
    return args


def main(argv=None):
    args = parse_args(argv)
    sys.path.insert(0, str(HERE))
    from common import blas_info, cpu_model, cpuinfo, default_path, format_table
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load0 = os.getloadavg()
    rows = []
    stub_folder = tempfile.TemporaryDirectory(prefix="against_torch-")
    args.torch_env = torch_sides(args, Path(stub_folder.name))
    sides = ["ours", *args.torch_env]
    if "gemms" in args.tasks:
        args.tasks = [t for t in args.tasks if t != "gemms"]
        rates = {side: run_process(side, args, "gemms", "small") for side in sides}
        print("| M x K x N | " + " | ".join(f"{side} GFLOP/s" for side in sides) + " |\n|---|"
              + "---:|" * len(sides))
        for i, shape in enumerate(rates["ours"]["shapes"]):
            print(f"| {' x '.join(map(str, shape))} | " + " | ".join(f"{rates[side]['gflops'][i]:.0f}"
                                                                   for side in sides) + " |")
        rows.append({"task": "gemms", **rates})
    for task in args.tasks:
        for config in args.configs:
            runs = []
            for r in range(args.rounds):
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    runs.append(run_process(side, args, task, config))
            row = summarise(runs, task, config)
            row["runs"] = runs
            rows.append(row)
            print(f"{task} {config}: ours {row['ours']['tokens_per_s']:,.0f} tok/s, "
                  + ", ".join(f"{side} {row['sides'][side]['tokens_per_s']:,.0f}" for side in sides[1:])
                  + f"; ours / {row['torch_side']} {row['speed_ratio']:.2f}", flush=True)
    header = ("task", "config", "B x T", "ours tok/s", "torch as installed tok/s", "torch at its best tok/s",
              "ours / best torch", "ours / installed torch", "ours peak MB", "torch peak MB", "memory ours/torch")
    rows_timed = [r for r in rows if r["task"] != "gemms"]
    table = [[r["task"], r["config"], f"{r['B']}x{r['T']}", f"{r['ours']['tokens_per_s']:,.0f}",
              f"{r['sides']['torch']['tokens_per_s']:,.0f}", f"{r['torch']['tokens_per_s']:,.0f} ({r['torch_side']})",
              f"{r['speed_ratio']:.2f}", f"{r['speed_ratio_installed']:.2f}", f"{r['ours']['peak_mb']:.1f}",
              f"{r['torch']['peak_mb']:.1f}", f"{r['memory_ratio']:.2f}"] for r in rows_timed]
    print(format_table(header, table))
    torch_version = next((r.get("version") for row in rows_timed for r in row["runs"] if r["side"] == "torch"), None)
    path = args.json or default_path("against_torch")
    from minitransformer.atomic import write_json
    write_json(path, {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), "started_utc": started,
        "load_average_start": load0, "load_average_end": os.getloadavg(), "cpu": cpu_model(),
        "cpus": os.cpu_count(), "cpu_vendor": cpuinfo("vendor_id"), "blas": blas_info(), "threads": args.threads,
        "processes": args.processes,
        "torch": torch_version,
        "torch_sides": {side: {k: Path(v).name for k, v in env.items()} for side, env in args.torch_env.items()},
        "rounds": args.rounds, "steps": args.steps, "warmup": args.warmup, "rows": rows})
    print(f"wrote {path}")


def worker_main(argv):
    p = argparse.ArgumentParser()
    for name in ("--task", "--config"):
        p.add_argument(name, required=True)
    for name in ("--B", "--T", "--steps", "--warmup", "--threads"):
        p.add_argument(name, type=int, required=True)
    a = p.parse_args(argv)
    sys.path.insert(0, str(HERE))
    print(json.dumps(our_worker(a.task, a.config, a.B, a.T, a.steps, a.warmup)))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker_main(sys.argv[2:])
    else:
        main()
