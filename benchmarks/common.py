"""What the benchmark scripts share: the models, the measured work (a training step,
a forward pass), timing in turns, the command-line options every script has, the
description of the machine, and the output (Markdown tables, a new JSON file per run).

Import this module only after :func:`blas_threads.configure_from_argv` (it imports
NumPy). It puts the repository root first on ``sys.path``, so the scripts measure
this checkout, installed or not.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from blas_threads import DEFAULT_THREADS, PIN_VARIABLES, THREAD_VARIABLES

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # benchmark the checkout, installed or not

from minitransformer import backend, devices, kernels, runtime  # noqa: E402
from minitransformer.backend import xp  # noqa: E402
from minitransformer.fast.engine import parallel  # noqa: E402
from minitransformer.models import DecoderLM, DecoderLMConfig  # noqa: E402
from minitransformer.nn import CrossEntropyLoss  # noqa: E402
from minitransformer.optim import Adam, clip_grad_norm  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS_DIR = HERE / "results"  # new runs write new files here; the older JSON files stay as they are
VOCAB = 112
SHAPES = ((64, 64), (32, 128))  # (batch B, length T): the model reads (B, T) tokens
SAMPLE_BATCH, SAMPLE_NEW = 64, 64  # sampling (decode_speed.py): 64 sequences x 64 new tokens after BOS
SAMPLE_MAX_LEN = 1 + SAMPLE_NEW  # BOS + the new tokens; every config has room for them


# ---------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------
def config_small(max_len: int) -> DecoderLMConfig:
    """D=64, 2 pre-LN layers, 4 heads (d_head 16), d_ff 256, exact GELU, no dropout."""
    return DecoderLMConfig(vocab_size=VOCAB, max_len=max_len, d_model=64, n_heads=4, n_layers=2,
                           d_ff=256, norm="pre", activation="gelu")


def config_tomczak(max_len: int) -> DecoderLMConfig:
    """The reference ARM: D=64, 10 post-LN layers, 4 heads of width 64, d_ff 256,
    exact GELU, dropout 0.1 on the embedding sum only."""
    return DecoderLMConfig.tomczak(vocab_size=VOCAB, max_len=max_len)


def config_medium(max_len: int) -> DecoderLMConfig:
    """D=256, 4 pre-LN layers, 8 heads (d_head 32), d_ff 1024, exact GELU, no dropout."""
    return DecoderLMConfig(vocab_size=VOCAB, max_len=max_len, d_model=256, n_heads=8, n_layers=4,
                           d_ff=1024, norm="pre", activation="gelu")


CONFIGS = {"small": config_small, "tomczak": config_tomczak, "medium": config_medium}


def make_config(name: str, T: int) -> DecoderLMConfig:
    """The named config with room for T positions (and for the sampling run)."""
    return CONFIGS[name](max(T, SAMPLE_MAX_LEN))


def d_head(cfg: DecoderLMConfig) -> int:
    """Width of one attention head."""
    return cfg.d_head if cfg.d_head is not None else cfg.d_model // cfg.n_heads


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------
def time_call(fn) -> float:
    """Seconds for one ``fn()``, with the device synchronised before and after."""
    devices.synchronize()
    t0 = time.perf_counter()
    fn()
    devices.synchronize()
    return time.perf_counter() - t0


def interleaved_times(tasks: dict, repeats: int, warmup: int) -> dict:
    """Seconds of each run of each task (a name -> callable dict), timed in turns.

    After ``warmup`` untimed rounds, each of ``repeats`` rounds times every task
    once. A change in machine load then hits all tasks alike, so ratios between
    them (achieved/limit, uncached/cached) stay meaningful on a busy machine.
    """
    for _ in range(warmup):
        for fn in tasks.values():
            fn()
    samples = {name: [] for name in tasks}
    for _ in range(repeats):
        for name, fn in tasks.items():
            samples[name].append(time_call(fn))
    return samples


# ---------------------------------------------------------------------------
# The measured work: a training step, a forward pass
# ---------------------------------------------------------------------------
def make_batch(B: int, T: int, cfg: DecoderLMConfig, seed: int = 0):
    """Device ids (B, T + 1): BOS, then random tokens that are never PAD, so all
    B*T targets count. The model reads ids[:, :-1] and predicts ids[:, 1:]."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, cfg.vocab_size, size=(B, T + 1), dtype=np.int64)  # 0-2: PAD, BOS, EOS
    ids[:, 0] = cfg.bos_id
    return backend.asarray(ids)


def build(cfg: DecoderLMConfig):
    """A fresh model (training mode) and its Adam optimizer."""
    model = DecoderLM(cfg)
    return model, Adam(model, lr=1e-3)


def sampling_model(name: str) -> DecoderLM:
    """The config's model with max_len = 1 + 64, in which EOS can never be drawn.

    The EOS logit's bias is set to -1e4 (probability exp(-1e4) = 0 in float32), so
    no row stops early and every sampling call makes exactly 64 new tokens per row.
    Nothing else changes: the weights and the work per step are the real model's.
    """
    model = DecoderLM(CONFIGS[name](SAMPLE_MAX_LEN))
    model.head.linear.bias.data[model.config.eos_id] = -1e4
    return model


def train_step(model, optimizer, ids) -> None:
    """One training step as the trainer runs it: forward, mean cross-entropy over the
    targets, zero_grad, backward, global-norm clipping at 1.0, Adam update. The
    loss kernels are those of the selected set (``kernels``), like the layers'."""
    logits = model(ids[:, :-1])  # (B, T, V)
    loss_fn = CrossEntropyLoss(ignore_index=model.config.pad_id)
    loss_fn(logits, ids[:, 1:])
    model.zero_grad()
    model.backward(loss_fn.backward())
    clip_grad_norm(model, 1.0)
    optimizer.step()


def forward_only(model, ids) -> None:
    """The forward pass alone (logits), as evaluation or scoring runs it."""
    model(ids[:, :-1])


# ---------------------------------------------------------------------------
# Command line shared by every script
# ---------------------------------------------------------------------------
def parse_shape(text: str) -> tuple[int, int]:
    """"64x64" -> (64, 64)."""
    try:
        B, T = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must look like 64x64 (BxT), got {text!r}") from None
    return B, T


def parser(doc: str, timing: bool = True) -> argparse.ArgumentParser:
    """A parser with the options every benchmark script has (``doc``: the script's
    docstring); ``timing``: with ``--repeats`` and ``--warmup``."""
    from minitransformer.cli.arguments import ArgumentParser  # errors in one line
    p = ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("numpy", "cupy", "strict"), default="numpy",
                   help="array backend (strict: the CPU stand-in for CuPy, to check that path)")
    p.add_argument("--kernels", choices=kernels.KERNEL_SETS, default=None,
                   help="kernel set (default: MINITRANSFORMER_KERNELS, else fast)")
    if timing:
        p.add_argument("--repeats", type=int, default=None,
                       help="timed runs per measurement, the median is reported (default 5; --quick: 2)")
        p.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 2; --quick: 1)")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                   help="BLAS/OpenMP threads, set before NumPy is imported (default 2)")
    p.add_argument("--quick", action="store_true", help="smoke test (see the script's description)")
    p.add_argument("--pinned", action="store_true",
                   help="keep the machine's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (default: dropped, as on a "
                        "user's machine; read before NumPy is imported)")
    p.add_argument("--json", type=Path, default=None,
                   help="results file (default: a new file in benchmarks/results/)")
    return p


def add_config_options(p: argparse.ArgumentParser, shapes: bool = True) -> None:
    """``--configs`` (and ``--shapes``) for the scripts that run each model."""
    p.add_argument("--configs", type=lambda s: s.split(","), default=None,
                   help=f"comma-separated subset of {','.join(CONFIGS)} (default: all; --quick: small)")
    if shapes:
        p.add_argument("--shapes", type=lambda s: [parse_shape(x) for x in s.split(",")], default=None,
                       help="comma-separated BxT list (default: 64x64,32x128; --quick: 64x64)")


def finish_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """Fill in what --quick and the defaults say; check the configs."""
    if hasattr(args, "repeats"):
        args.repeats = args.repeats or (2 if args.quick else 5)
        args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    if hasattr(args, "configs"):
        args.configs = args.configs or (["small"] if args.quick else list(CONFIGS))
        unknown = sorted(set(args.configs) - set(CONFIGS))
        if unknown:
            p.error(f"unknown config(s) {unknown}; choose from {list(CONFIGS)}")
    if hasattr(args, "shapes"):
        args.shapes = args.shapes or ([SHAPES[0]] if args.quick else list(SHAPES))
    return args


# ---------------------------------------------------------------------------
# Machine description, start and end of a run
# ---------------------------------------------------------------------------
def cpuinfo(field: str) -> str | None:
    """A field of /proc/cpuinfo ("model name", "vendor_id" ...), or None off Linux."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(field):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def cpu_model() -> str | None:
    """The CPU's "model name" from /proc/cpuinfo (Linux), or platform.processor()."""
    return cpuinfo("model name") or platform.processor() or None


def blas_info():
    """NumPy's BLAS as ``np.show_config(mode='dicts')`` reports it (NumPy >= 1.26), without the
    directories of the machine that built NumPy."""
    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # older NumPy: no dict mode
        return None
    return {k: v for k, v in blas.items() if not k.endswith("directory")}


def gpu_info() -> dict | None:
    """Device name, CuPy and CUDA runtime versions under the cupy backend."""
    if backend.name() != "cupy":
        return None
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    return {"name": props["name"].decode(), "cupy": xp.__version__,
            "cuda_runtime": xp.cuda.runtime.runtimeGetVersion(),
            "memory_bytes": props["totalGlobalMem"]}


def machine_description(args) -> dict:
    """Where and how the numbers were taken."""
    ran = runtime.describe()  # the BLAS library and kernel that run, and whether the kernels are compiled
    return {
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(), "platform": platform.platform(),
        "numpy": np.__version__, "blas": blas_info(), "gpu": gpu_info(),
        "blas_loaded": ran["blas"], "blas_pins": {v: os.environ.get(v) for v in PIN_VARIABLES},
        "compiled_kernels": ran["compiled"],
        "backend": backend.name(), "kernels": kernels.name(), "threads": args.threads,
        "thread_env": {v: os.environ.get(v) for v in THREAD_VARIABLES + (
            "OPENBLAS_THREAD_TIMEOUT", "MINITRANSFORMER_THREADS", "MINITRANSFORMER_KERNELS")},
        "pool_threads": parallel.threads(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def warn_if_busy(machine: dict, threads: int) -> None:
    """Say so when other work already occupies the cores the BLAS threads need:
    a BLAS thread that waits for a descheduled partner can turn a 100 us product
    into a 100 ms one, and every number becomes noise."""
    load, cpus = machine["load_average_at_start"][0], machine["cpus_available"] or machine["cpu_count"] or 1
    if backend.name() != "cupy" and load + threads > cpus + 0.5:
        print(f"warning: load average {load:.1f} on {cpus} CPUs: with {threads} BLAS threads the cores "
              "are oversubscribed and the timings will be noisy (see README)", file=sys.stderr)


def start(args, what: str) -> dict:
    """Select backend and kernels, describe the machine, print a header line, warn
    about thread variables set too late and a busy machine. Returns the description."""
    if os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        print(f"warning: BLAS thread variables are not {args.threads}: NumPy was imported before "
              "they could be set (run this file as a script)", file=sys.stderr)
    backend.use(args.backend)
    if args.kernels:
        kernels.use(args.kernels)
    machine = machine_description(args)
    timing = f"repeats {args.repeats} after {args.warmup} warm-up, " if hasattr(args, "repeats") else ""
    print(f"{what}: backend {backend.name()}, kernels {kernels.name()}, {args.threads} BLAS threads, "
          f"pool {machine['pool_threads']}, {machine['cpu_model']}, numpy {np.__version__}, {timing}"
          f"load average {machine['load_average_at_start'][0]:.1f}", flush=True)
    print(f"  {runtime.summary_line()}", flush=True)  # the BLAS kernel that runs, pinned or not
    warn_if_busy(machine, args.threads)
    return machine


def default_path(name: str, suffix: str = "json") -> Path:
    """``benchmarks/results/<name>-<UTC date and time>.<suffix>``: a new file per run."""
    stamp = datetime.datetime.now(datetime.timezone.utc)
    return RESULTS_DIR / f"{name}-{stamp:%Y%m%d-%H%M%S}.{suffix}"


def portable_path(text: str) -> str:
    """``text`` as a results file may record it: an absolute path becomes relative to the repository
    (or the current folder) when inside it, else ``.../name``; anything else is kept."""
    if not os.path.isabs(text):
        return text
    path = Path(text)
    for root in (REPO_ROOT, Path.cwd()):
        if path.is_relative_to(root):
            return path.relative_to(root).as_posix()
    return f".../{path.name}"


def shown_command(script: str, argv: list, shown_as: dict | None = None) -> str:
    """``python benchmarks/SCRIPT.py ARGV`` with no path of this machine (:func:`portable_path`, also in
    ``--name=value``); ``shown_as`` maps an option to the function that shows its value instead."""
    shown_as = shown_as or {}
    out = []
    for i, a in enumerate(argv):
        if a.startswith("--") and "=" in a:
            name, value = a.split("=", 1)
            out.append(f"{name}={shown_as.get(name, portable_path)(value)}")
        else:
            out.append(shown_as.get(argv[i - 1] if i > 0 else "", portable_path)(a))
    return " ".join(["python", f"benchmarks/{script}.py", *out])


def write_result(args, name: str, machine: dict, payload: dict, quiet: bool = False) -> Path:
    """Write machine description, settings and ``payload`` as JSON (``--json`` or a new file), atomically
    (a script that saves after every part never leaves half a file); ``quiet``: without the line saying where."""
    machine["load_average_at_end"] = os.getloadavg()
    path = args.json or default_path(name)
    result = {"benchmark": name, "command": shown_command(name, sys.argv[1:]),
              "machine": machine,
              "settings": {"repeats": getattr(args, "repeats", None), "warmup": getattr(args, "warmup", None),
                           "vocab_size": VOCAB},
              **payload}
    from minitransformer.atomic import atomic_write
    atomic_write(path, lambda f: f.write(json.dumps(result, indent=1)), binary=False)
    if not quiet:
        print(f"results: {path}")
    return path


def mb(n_bytes: float) -> float:
    """Bytes -> megabytes (10^6)."""
    return n_bytes / 1e6


def format_table(header, rows) -> str:
    """A Markdown table, columns right-aligned and padded so it also reads well as plain text."""
    cells = [list(header)] + [list(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.rjust(w) for c, w in zip(line, widths)) + " |" for line in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines)
