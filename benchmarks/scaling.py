#!/usr/bin/env python
"""Training speed and peak memory of ``medium`` against the sequence length T, at a
fixed number of tokens per batch: where attention's T^2 terms take over.

Run from the repository root::

    python benchmarks/scaling.py                          # T = 64 ... 1024 (about 5 minutes on 2 cores)
    python benchmarks/scaling.py --quick                  # T = 64, 128, 2 repeats
    python benchmarks/scaling.py --scaling-lengths 64,256,1024

For each T, B = 4096 / T: training tokens/s (as train_speed.py: the median of
``--repeats`` runs after ``--warmup``, in turns with the step's GEMMs), the GEMM
limit, peak memory (as memory.py) and the FLOP ratio of the T^2 products to the
linear maps; then each config's crossover length T*. Plotted to a new PNG and
written to a new JSON file in ``benchmarks/results/`` (``--plot``, ``--json``).
"""
from __future__ import annotations

import sys
from pathlib import Path

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

from common import (  # noqa: E402
    CONFIGS, SAMPLE_MAX_LEN, default_path, finish_args, make_config, mb, parser, start, write_result,
)
from gemms import crossover_length, forward_flops_per_layer  # noqa: E402
from memory import peak_step_memory  # noqa: E402
from minitransformer import backend  # noqa: E402
from train_speed import measure  # noqa: E402

SCALING_TOKENS = 4096  # tokens per batch: B = 4096 / T
SCALING_LENGTHS = (64, 128, 256, 512, 1024)
QUICK_SCALING_LENGTHS = (64, 128)


def run_scaling(args) -> list[dict]:
    """``medium`` at SCALING_TOKENS tokens per batch for each T: training tokens/s,
    GEMM-bound tokens/s and peak memory."""
    points = []
    for T in args.scaling_lengths:
        B = SCALING_TOKENS // T
        cfg = make_config("medium", T)
        timed = measure(cfg, B, T, args.repeats, args.warmup, forward=False)
        train_s, limit = timed["train_s"], timed["gemm_limit"]
        memory = peak_step_memory(cfg, B, T)
        flops = forward_flops_per_layer(cfg, B, T)
        point = {"T": T, "B": B, "train_step_s": train_s, "train_tokens_per_s": B * T / train_s,
                 "train_runs_s": timed["train_runs_s"],
                 "gemm_limit_tokens_per_s": limit["train_tokens_per_s"],
                 "achieved_over_limit": limit["train_seconds"] / train_s,
                 "peak_bytes": memory["peak_bytes"], "t2_over_linear": flops["t2"] / flops["linear"]}
        print(f"  scaling T={T:5d} B={B:3d}: {point['train_tokens_per_s']:9.0f} tok/s "
              f"(GEMM limit {point['gemm_limit_tokens_per_s']:9.0f}), peak {mb(point['peak_bytes']):7.1f} MB, "
              f"T^2/linear FLOPs {point['t2_over_linear']:.2f}", flush=True)
        points.append(point)
    return points


def plot_scaling(points: list[dict], path: Path, title: str) -> None:
    """Two panels against T (log scale): tokens/s (measured and GEMM limit), peak memory."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ts = [p["T"] for p in points]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.plot(Ts, [p["train_tokens_per_s"] for p in points], "o-", label="training step (measured)")
    ax1.plot(Ts, [p["gemm_limit_tokens_per_s"] for p in points], "s--", label="GEMM limit (matmuls only)")
    ax1.set_ylabel("tokens / s")
    ax1.set_ylim(bottom=0)
    ax1.legend()
    ax2.plot(Ts, [mb(p["peak_bytes"]) for p in points], "o-", color="C2")
    ax2.set_ylabel("peak memory of a step (MB)")
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ts, [str(t) for t in Ts])
        ax.set_xlabel(f"sequence length T  (batch B = {SCALING_TOKENS} / T)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    p = parser(__doc__)
    p.add_argument("--scaling-lengths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help=f"T values of the sweep (default {','.join(map(str, SCALING_LENGTHS))}; "
                        f"--quick: {','.join(map(str, QUICK_SCALING_LENGTHS))})")
    p.add_argument("--plot", type=Path, default=None,
                   help="sweep plot file (default: a new PNG in benchmarks/results/)")
    args = finish_args(p, p.parse_args(argv))
    args.scaling_lengths = args.scaling_lengths or list(QUICK_SCALING_LENGTHS if args.quick else SCALING_LENGTHS)
    bad = [T for T in args.scaling_lengths if T <= 0 or SCALING_TOKENS % T]
    if bad:
        p.error(f"scaling lengths must divide {SCALING_TOKENS}: {bad}")
    return args


def main(argv=None) -> None:
    """Run the sweep, plot it, print the crossover lengths, write the JSON."""
    args = parse_args(argv)
    machine = start(args, "scaling")
    print(f"medium, {SCALING_TOKENS} tokens per batch", flush=True)
    points = run_scaling(args)
    plot = args.plot or default_path("scaling", "png")
    plot_scaling(points, plot, f"medium, {SCALING_TOKENS} tokens/batch, backend {backend.name()}, "
                               f"{args.threads} threads")
    print(f"plot: {plot}")
    crossover = {n: crossover_length(make_config(n, SAMPLE_MAX_LEN)) for n in CONFIGS}
    for name, T_star in crossover.items():
        print(f"{name}: T^2 attention FLOPs equal the linear ones at T* = {T_star:.0f}")
    write_result(args, "scaling", machine, {"scaling_tokens": SCALING_TOKENS, "scaling": points,
                                            "plot": str(plot), "crossover_T": crossover})


if __name__ == "__main__":
    main()
