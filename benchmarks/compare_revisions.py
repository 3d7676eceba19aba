#!/usr/bin/env python
"""Training (or KV-cached sampling) speed of two or more source trees, side by side, in one run.

Each tree is a checkout of the library (``git worktree add --detach ../mt-OLD OLD``
makes one of an old commit). Run from the repository root::

    python benchmarks/compare_revisions.py --tree before=../mt-66d90af --tree after=. \\
        --tree after-reference=.@reference --rounds 10

``LABEL=PATH[@KERNELS]``: PATH is put alone on ``PYTHONPATH``; ``@KERNELS`` sets
``MINITRANSFORMER_KERNELS`` (``reference`` or ``fast``; ``fast-numpy`` is the fast set
with ``MINITRANSFORMER_NUMBA=0``, without its compiled loops) for that entry, which
trees without kernel sets ignore (the worker records what it got).

What one measurement is: a fresh Python process (this file with ``--worker``)
sets the BLAS thread variables and ``OPENBLAS_THREAD_TIMEOUT`` before NumPy is
imported, builds the model, and times full training steps, float32::

    model.zero_grad(); loss, _ = task.loss(model, batch); task.backward(model); opt.step()

with ``LMTask`` and ``AdamW(lr=1e-3)``, on one fixed batch of random ids (never
PAD). ``--warmup`` steps are not timed; the process reports the median of its
``--steps`` timed steps. ``--task sample``: a step is instead one call of
``sample(model, batch_size=64, max_len=65, rng=0, use_cache=True)`` on the model in
eval mode with EOS made impossible (its logit's bias -1e4, as ``common.sampling_model``),
64 x 64 new tokens, under the decoding thread timeout. The worker uses only names that
exist, with the same signatures, in every revision compared so far (``DecoderLM``,
``DecoderLMConfig``, ``LMTask.loss/backward``, ``AdamW``, ``Module.zero_grad``; for
sampling ``generate.sample(model, batch_size, max_len, rng, use_cache)``, ``Module.eval``
and ``model.head.linear.bias``), so the same code measures every tree.

Rounds: each round runs one process per (model, entry); the entries' order
rotates from round to round (AB, BA, AB, ... for two), so a burst of load or a
slow drift hits every entry alike. Reported per model and entry: the median over
rounds of the per-process tokens/s, its min-max, and against ``--baseline`` (the
first entry unless named) the median of the per-round ratios with their min-max
and interquartile range; the same for each process's fastest step, also over the
quiet rounds only (see :func:`summarize`). The JSON is rewritten after every
round; ``--summarize FILE`` prints an earlier run's table again.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from blas_threads import TIMEOUTS, unpin, work_env

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
VOCAB = 112
# name -> (DecoderLMConfig keyword arguments, or "tomczak"; B; T). The same as
# benchmarks/common.py's configs (max_len = max(T, 65) there as here).
MODELS = {
    "small": (dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, norm="pre", activation="gelu"), 64, 64),
    "tomczak": ("tomczak", 64, 64),
    "medium": (dict(d_model=256, n_heads=8, n_layers=4, d_ff=1024, norm="pre", activation="gelu"), 32, 128),
}
SAMPLE_BATCH = 64  # --task sample: sequences per call, each 64 new tokens (as common.py's sampling)
HERE = Path(__file__).resolve().parent
QUIET = 1.3  # a "quiet" round: each side's best step within 30 % of its own fastest step of the run


def _timeout_kind(task: str) -> str:
    """Which OpenBLAS idle-thread timeout of blas_threads.TIMEOUTS the task runs under."""
    return "decode" if task == "sample" else "train"


# ---------------------------------------------------------------------------
# The worker: one tree, one model, one fresh process
# ---------------------------------------------------------------------------
def worker(args) -> None:
    """Time ``args.steps`` training (or sampling) steps after ``args.warmup``; print one JSON line."""
    for var in THREAD_VARIABLES:
        os.environ[var] = str(args.threads)
    work_env(os.environ, _timeout_kind(args.task))  # OpenBLAS's idle-thread timeout, unless set
    import numpy as np  # after the thread variables

    import minitransformer
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.optim import AdamW
    from minitransformer.tasks import LMTask

    root = Path(minitransformer.__file__).resolve().parents[1]
    if args.expect_root and root != Path(args.expect_root).resolve():
        raise SystemExit(f"worker imported minitransformer from {root}, not {args.expect_root}")
    spec, B, T = MODELS[args.model]
    max_len = 65 if args.task == "sample" else max(T, 65)  # sampling: BOS + 64, as common.SAMPLE_MAX_LEN
    if spec == "tomczak":
        cfg = DecoderLMConfig.tomczak(vocab_size=VOCAB, max_len=max_len)
    else:
        cfg = DecoderLMConfig(vocab_size=VOCAB, max_len=max_len, **spec)
    model = DecoderLM(cfg)  # training mode: tomczak's embedding dropout is on
    if args.task == "sample":  # 64 x 64 new tokens, KV-cached; EOS never drawn
        from minitransformer.generate import sample
        model.eval()
        model.head.linear.bias.data[cfg.eos_id] = -1e4
        B, T = SAMPLE_BATCH, max_len - 1

        def step():
            sample(model, batch_size=B, max_len=max_len, rng=0, use_cache=True)
            return None  # no loss
    else:
        task = LMTask(pad_id=cfg.pad_id)
        opt = AdamW(model, lr=1e-3)
        rng = np.random.default_rng(0)
        batch = rng.integers(3, VOCAB, size=(B, T + 1), dtype=np.int64)  # host ids, 0-2: PAD, BOS, EOS
        batch[:, 0] = cfg.bos_id

        def step():
            model.zero_grad()
            loss, _ = task.loss(model, batch)
            task.backward(model)
            opt.step()
            return loss

    losses, wall, cpu = [], [], []
    for i in range(args.warmup + args.steps):
        t0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        t1, c1 = time.perf_counter(), time.process_time()
        if i >= args.warmup:
            wall.append(t1 - t0)
            cpu.append(c1 - c0)
        losses.append(None if loss is None else float(loss))  # outside the timed span (a no-op sync on NumPy)
    # Probe only files the tree has: the editable install's import hook would serve a
    # module an old tree lacks (minitransformer/kernels.py) from the installed checkout.
    package = root / "minitransformer"
    kernels = None  # a revision before the kernel sets
    if (package / "kernels.py").is_file():
        from minitransformer import kernels as kernel_module
        kernels = kernel_module.name()
    pool = None
    for module in ("fast/parallel", "parallel"):
        if (package / f"{module}.py").is_file():
            pool = __import__("minitransformer." + module.replace("/", "."), fromlist=["threads"]).threads()
            break
    try:  # the BLAS that ran in this worker, and its kernel (threadpoolctl, if installed)
        from threadpoolctl import threadpool_info
        blas = [{k: info.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                for info in threadpool_info() if info.get("user_api") == "blas"]
    except ImportError:
        blas = "threadpoolctl is not installed: the BLAS kernel is unknown"
    strays = sorted(name for name, mod in sys.modules.items() if name.split(".")[0] == "minitransformer"
                    and getattr(mod, "__file__", None) and root not in Path(mod.__file__).resolve().parents)
    if strays:
        raise SystemExit(f"worker loaded modules from outside {root}: {strays}")
    print(json.dumps({
        "model": args.model, "task": args.task, "B": B, "T": T, "root": shown_path(root), "kernels": kernels,
        "pool_threads": pool,
        "parameters": model.num_parameters(), "step_s": wall, "cpu_s": cpu,
        "median_step_s": statistics.median(wall), "tokens_per_s": B * T / statistics.median(wall),
        "loss_first": losses[0], "loss_last": losses[-1], "blas": blas,
        "env": {v: os.environ.get(v) for v in THREAD_VARIABLES + (
            "OPENBLAS_THREAD_TIMEOUT", "MINITRANSFORMER_KERNELS", "MINITRANSFORMER_THREADS",
            "MINITRANSFORMER_NUMBA")},
    }))


# ---------------------------------------------------------------------------
# The driver: rounds of fresh processes, entries rotating
# ---------------------------------------------------------------------------
def shown_path(path) -> str:
    """``path`` as a results file records it: relative to this checkout (``.``, ``../mt-66d90af``) when it
    lies in it or beside it, else only its name; a results file holds no absolute path of a machine."""
    here, path = Path(__file__).resolve().parents[1], Path(path).resolve()
    for base, prefix in ((here, ""), (here.parent, "../")):
        try:
            return prefix + (path.relative_to(base).as_posix() or ".")
        except ValueError:
            continue
    return path.name


def parse_entry(text: str) -> dict:
    """"LABEL=PATH[@KERNELS]" -> {"label", "path", "kernels"}."""
    label, sep, rest = text.partition("=")
    if not sep or not label or not rest:
        raise argparse.ArgumentTypeError(f"--tree wants LABEL=PATH[@KERNELS], got {text!r}")
    path, _, kernels = rest.partition("@")
    root = Path(path).resolve()
    if not (root / "minitransformer" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{root} holds no minitransformer package")
    if kernels and kernels not in ("reference", "fast", "fast-numpy"):
        raise argparse.ArgumentTypeError(f"kernel set must be reference, fast or fast-numpy, got {kernels!r}")
    return {"label": label, "path": str(root), "kernels": kernels or None}


def run_worker(entry: dict, model: str, args) -> dict:
    """One measurement in a fresh process with PYTHONPATH = the entry's tree."""
    env = unpin(dict(os.environ), args.pinned)  # a user's machine has no BLAS pin
    env["PYTHONPATH"] = entry["path"]
    for var in THREAD_VARIABLES:
        env[var] = str(args.threads)
    work_env(env, _timeout_kind(args.task))
    env.pop("MINITRANSFORMER_KERNELS", None)
    env.pop("MINITRANSFORMER_NUMBA", None)
    if entry["kernels"] == "fast-numpy":  # the fast kernels without their compiled (Numba) loops
        env["MINITRANSFORMER_KERNELS"], env["MINITRANSFORMER_NUMBA"] = "fast", "0"
    elif entry["kernels"]:
        env["MINITRANSFORMER_KERNELS"] = entry["kernels"]
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--model", model,
           "--task", args.task, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--threads", str(args.threads),
           "--expect-root", entry["path"]]
    load = os.getloadavg()[0]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd="/")
    if done.returncode != 0:
        raise RuntimeError(f"worker {entry['label']} {model} failed:\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["load_before"] = load
    return result


def spread(values: list[float]) -> dict:
    """Median, min, max and the quartiles of ``values``."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) >= 2 else [values[0]] * 3
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "q1": q[0], "q3": q[2], "n": len(values)}


def summarize(runs: dict, labels: list[str], baseline: str, models: list[str]) -> dict:
    """runs[model][label] = list of worker results (one per round) -> the statistics.

    Besides each process's median step, its fastest step ("best"): on a shared
    machine the delays are one-sided (a step is never sped up by other load), so
    the best of a few steps tracks the code's own speed more closely. And the same
    best-step ratio over the *quiet* rounds only: those where each side's best step
    came within QUIET of that side's fastest step in the whole run (a filter that
    treats both sides alike)."""
    out = {}
    for model in models:
        out[model] = {}
        base = [r["tokens_per_s"] for r in runs[model][baseline]]
        base_best = [min(r["step_s"]) for r in runs[model][baseline]]
        for label in labels:
            tps = [r["tokens_per_s"] for r in runs[model][label]]
            best = [min(r["step_s"]) for r in runs[model][label]]
            n = min(len(tps), len(base))
            ratios = [tps[i] / base[i] for i in range(n)]  # the same round: neighbours in time
            best_ratios = [base_best[i] / best[i] for i in range(n)]
            quiet = [base_best[i] / best[i] for i in range(n)
                     if best[i] < QUIET * min(best) and base_best[i] < QUIET * min(base_best)]
            out[model][label] = {
                "tokens_per_s": spread(tps),
                "step_ms": spread([r["median_step_s"] * 1e3 for r in runs[model][label]]),
                "best_step_ms": spread([b * 1e3 for b in best]),
                "cpu_step_ms": spread([statistics.median(r["cpu_s"]) * 1e3 for r in runs[model][label]]),
                "cpu_over_wall": statistics.median(
                    sum(r["cpu_s"]) / sum(r["step_s"]) for r in runs[model][label]),
                "ratio_to_baseline": spread(ratios) if ratios else None,
                "best_ratio_to_baseline": spread(best_ratios) if best_ratios else None,
                "quiet_ratio_to_baseline": spread(quiet) if quiet and label != baseline else None,
                "loss_first": runs[model][label][0]["loss_first"],
                "kernels": runs[model][label][0]["kernels"],
                "pool_threads": runs[model][label][0]["pool_threads"],
            }
    return out


def format_table(summary: dict, labels: list[str], baseline: str, shapes: dict) -> str:
    """The Markdown table of :func:`summarize`'s result."""
    head = ["model", "B x T", "tree", "kernels", "ms/step", "tok/s (median)", "tok/s min-max",
            f"ratio to {baseline}", "ratio min-max", "ratio IQR", "best ms", "best ratio", "best IQR",
            "quiet ratio (rounds)", "CPU/wall"]
    rows = [head]
    for model, per in summary.items():
        for label in labels:
            s = per[label]
            t, r, rb = s["tokens_per_s"], s["ratio_to_baseline"], s["best_ratio_to_baseline"]
            rq = s.get("quiet_ratio_to_baseline")
            rows.append([model, "%dx%d" % shapes[model], label, str(s["kernels"] or "-"),
                         f"{s['step_ms']['median']:.1f}", f"{t['median']:,.0f}",
                         f"{t['min']:,.0f}-{t['max']:,.0f}", f"{r['median']:.3f}",
                         f"{r['min']:.2f}-{r['max']:.2f}", f"{r['q1']:.2f}-{r['q3']:.2f}",
                         f"{s['best_step_ms']['median']:.1f}", f"{rb['median']:.3f}",
                         f"{rb['q1']:.2f}-{rb['q3']:.2f}",
                         f"{rq['median']:.3f} ({rq['n']})" if rq else "- (0)", f"{s['cpu_over_wall']:.2f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["| " + " | ".join(c.ljust(w) if i < 4 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths)))
             + " |" for row in rows]
    lines.insert(1, "|" + "|".join(("-" * (w + 2)) if i < 4 else ("-" * (w + 1) + ":")
                                   for i, w in enumerate(widths)) + "|")
    return "\n".join(lines)


def resummarize(path: Path) -> None:
    """Summarize a results file again (with this version's statistics), print its table."""
    record = json.loads(path.read_text())
    labels = [e["label"] for e in record["trees"]]
    runs, models = record["runs"], list(record["runs"])
    record["summary"] = summarize(runs, labels, record["baseline"], models)
    path.write_text(json.dumps(record, indent=1))
    print(format_table(record["summary"], labels, record["baseline"], {m: tuple(record["shapes"][m]) for m in models}))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--tree", type=parse_entry, action="append", default=[], metavar="LABEL=PATH[@KERNELS]",
                   help="a source tree to measure (two or more entries; see below)")
    p.add_argument("--baseline", help="label the ratios are taken against (default: the first --tree)")
    p.add_argument("--models", type=lambda s: s.split(","), default=list(MODELS),
                   help=f"comma-separated subset of {','.join(MODELS)} (default: all)")
    p.add_argument("--task", choices=("train", "sample"), default="train",
                   help="what a step is: a training step, or a KV-cached sampling call (default train)")
    p.add_argument("--rounds", type=int, default=8, help="processes per (model, tree) (default 8)")
    p.add_argument("--steps", type=int, default=5, help="timed steps per process (default 5)")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first, per process (default 3)")
    p.add_argument("--threads", type=int, default=2, help="BLAS/OpenMP threads (default 2)")
    p.add_argument("--pinned", action="store_true",
                   help="keep the machine's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in the workers (default: dropped)")
    p.add_argument("--json", type=Path, default=None,
                   help="results file (default benchmarks/results/compare-<UTC time>.json)")
    p.add_argument("--summarize", type=Path, metavar="JSON",
                   help="print the table of an earlier run's JSON file (and add its summary), measure nothing")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", help=argparse.SUPPRESS)
    p.add_argument("--expect-root", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker or args.summarize:
        return args
    if len(args.tree) < 2:
        p.error("give at least two --tree entries")
    labels = [e["label"] for e in args.tree]
    if len(set(labels)) != len(labels):
        p.error(f"labels must differ: {labels}")
    args.baseline = args.baseline or labels[0]
    if args.baseline not in labels:
        p.error(f"--baseline {args.baseline!r} is not one of {labels}")
    unknown = sorted(set(args.models) - set(MODELS))
    if unknown:
        p.error(f"unknown model(s) {unknown}; choose from {list(MODELS)}")
    if min(args.rounds, args.steps) < 1 or args.warmup < 0:
        p.error("--rounds and --steps must be >= 1, --warmup >= 0")
    return args


def git_describe(path: str) -> str | None:
    """``git describe --always --dirty`` of a tree, or None outside git."""
    done = subprocess.run(["git", "-C", path, "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip() or None


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    from common import cpu_model  # the driver only: common imports NumPy, the workers set threads first
    if args.summarize:
        resummarize(args.summarize)
        return
    stamp = datetime.datetime.now(datetime.timezone.utc)
    path = args.json or HERE / "results" / f"compare-{stamp:%Y%m%d-%H%M%S}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [e["label"] for e in args.tree]
    for e in args.tree:
        e["revision"] = git_describe(e["path"])
    sample_shape = (SAMPLE_BATCH, 64)  # --task sample: sequences x new tokens
    shapes = {m: MODELS[m][1:] if args.task == "train" else sample_shape for m in args.models}
    runs = {m: {label: [] for label in labels} for m in args.models}
    record = {"command": " ".join(["python", "benchmarks/compare_revisions.py"] + sys.argv[1:]),
              "date_utc": stamp.isoformat(timespec="seconds"),
              "trees": [dict(e, path=shown_path(e["path"])) for e in args.tree], "baseline": args.baseline,
              "settings": {"rounds": args.rounds, "steps": args.steps, "warmup": args.warmup,
                           "threads": args.threads, "python": shown_path(sys.executable),
                           "task": args.task, "OPENBLAS_THREAD_TIMEOUT": os.environ.get(
                               "OPENBLAS_THREAD_TIMEOUT", TIMEOUTS[_timeout_kind(args.task)])},
              "shapes": shapes, "load_average_at_start": os.getloadavg(), "cpus": os.cpu_count(),
              "cpu_model": cpu_model(), "runs": runs}
    print(f"{len(labels)} entries x {len(args.models)} models x {args.rounds} rounds; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    for e in args.tree:
        print(f"  {e['label']}: {e['path']} ({e['revision']}) kernels={e['kernels'] or 'default'}", flush=True)
    t_start = time.perf_counter()
    for rnd in range(args.rounds):
        order = args.tree[rnd % len(labels):] + args.tree[:rnd % len(labels)]
        for model in args.models:
            for entry in order:
                result = run_worker(entry, model, args)
                result["round"] = rnd
                runs[model][entry["label"]].append(result)
                print(f"round {rnd + 1}/{args.rounds} {model:8s} {entry['label']:18s} "
                      f"{result['median_step_s'] * 1e3:8.1f} ms/step {result['tokens_per_s']:9.0f} tok/s "
                      f"(load {result['load_before']:.2f}, kernels {result['kernels']})", flush=True)
        record["elapsed_s"] = time.perf_counter() - t_start
        record["summary"] = summarize(runs, labels, args.baseline, args.models)
        record["load_average_at_end"] = os.getloadavg()
        path.write_text(json.dumps(record, indent=1))
    print()
    print(format_table(record["summary"], labels, args.baseline, shapes))
    kernels_seen = sorted({str(b.get("architecture")) for rs in runs.values() for r in sum(rs.values(), [])
                           for b in (r["blas"] if isinstance(r.get("blas"), list) else [])})
    print(f"\nCPU {record['cpu_model']}; BLAS kernel(s) {', '.join(kernels_seen) or 'unknown'}")
    print(f"load average at start {record['load_average_at_start'][0]:.2f}, at end "
          f"{record['load_average_at_end'][0]:.2f}; {record['elapsed_s'] / 60:.1f} min; results: {path}")


if __name__ == "__main__":
    main()
