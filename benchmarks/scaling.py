#!/usr/bin/env python
"""Training speed and peak memory of ``medium`` against the sequence length T, at a
fixed number of tokens per batch (where attention's T^2 terms take over), and
against the model width D.

Run from the repository root::

    python benchmarks/scaling.py                          # T = 64 ... 1024 (about 5 minutes on 2 cores)
    python benchmarks/scaling.py --quick                  # T = 64, 128, 2 repeats
    python benchmarks/scaling.py --scaling-lengths 64,256,1024
    python benchmarks/scaling.py --scaling-widths 64,128,256,512   # the width sweep only at these D

For each T, B = 4096 / T: training tokens/s (as train_speed.py: the median of
``--repeats`` runs after ``--warmup``, in turns with the step's GEMMs), the GEMM
limit, peak memory (as memory.py) and the FLOP ratio of the T^2 products to the
linear maps; then each config's crossover length T*. The width sweep runs
``medium`` with D = 64 ... 512 (heads of 32, d_ff = 4D, 4 layers) at B x T = 64 x 64.
Both are plotted to a new PNG and written to a new JSON file in
``benchmarks/results/`` (``--plot``, ``--json``).
"""
from __future__ import annotations

import dataclasses
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
SCALING_WIDTHS = (64, 128, 256, 512)
QUICK_SCALING_WIDTHS = (64, 128)


def width_config(D: int, T: int):
    """``medium`` at width D: heads of 32, d_ff = 4D (D = 256 is medium itself)."""
    return dataclasses.replace(make_config("medium", T), d_model=D, n_heads=max(1, D // 32), d_ff=4 * D)


def run_scaling(args) -> list[dict]:
    """``medium`` at SCALING_TOKENS tokens per batch for each T: training tokens/s,
    GEMM-bound tokens/s and peak memory."""
    return [_point(make_config("medium", T), SCALING_TOKENS // T, T, args) for T in args.scaling_lengths]


def run_width_scaling(args) -> list[dict]:
    """``medium`` at each width D of the sweep, B x T = 64 x 64: the same measurements."""
    return [_point(width_config(D, 64), 64, 64, args) for D in args.scaling_widths]


def _point(cfg, B: int, T: int, args) -> dict:
    """One measured point: tokens/s, GEMM limit, peak memory, T^2/linear FLOPs."""
    timed = measure(cfg, B, T, args.repeats, args.warmup, forward=False)
    train_s, limit = timed["train_s"], timed["gemm_limit"]
    memory = peak_step_memory(cfg, B, T)
    flops = forward_flops_per_layer(cfg, B, T)
    point = {"T": T, "B": B, "D": cfg.d_model, "train_step_s": train_s, "train_tokens_per_s": B * T / train_s,
             "train_runs_s": timed["train_runs_s"],
             "gemm_limit_tokens_per_s": limit["train_tokens_per_s"],
             "achieved_over_limit": limit["train_seconds"] / train_s,
             "peak_bytes": memory["peak_bytes"], "t2_over_linear": flops["t2"] / flops["linear"]}
    print(f"  scaling D={cfg.d_model:4d} T={T:5d} B={B:3d}: {point['train_tokens_per_s']:9.0f} tok/s "
          f"(GEMM limit {point['gemm_limit_tokens_per_s']:9.0f}), peak {mb(point['peak_bytes']):7.1f} MB, "
          f"T^2/linear FLOPs {point['t2_over_linear']:.2f}", flush=True)
    return point


def plot_scaling(points: list[dict], widths: list[dict], path: Path, title: str) -> None:
    """Tokens/s (measured and GEMM limit) and peak memory, against T (top row, log
    scale) and against D (bottom row, when the width sweep ran)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(points, "T", f"sequence length T  (batch B = {SCALING_TOKENS} / T)")]
    if widths:
        rows.append((widths, "D", "model width D  (B x T = 64 x 64, heads of 32, d_ff = 4D)"))
    fig, axes = plt.subplots(len(rows), 2, figsize=(11, 4.2 * len(rows)), squeeze=False)
    for (pts, key, xlabel), (ax1, ax2) in zip(rows, axes):
        xs = [p[key] for p in pts]
        ax1.plot(xs, [p["train_tokens_per_s"] for p in pts], "o-", label="training step (measured)")
        ax1.plot(xs, [p["gemm_limit_tokens_per_s"] for p in pts], "s--", label="GEMM limit (matmuls only)")
        ax1.set_ylabel("tokens / s")
        ax1.legend()
        ax2.plot(xs, [mb(p["peak_bytes"]) for p in pts], "o-", color="C2")
        ax2.set_ylabel("peak memory of a step (MB)")
        for ax in (ax1, ax2):
            ax.set_ylim(bottom=0)
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.set_xlabel(xlabel)
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
    p.add_argument("--scaling-widths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help=f"D values of the width sweep (default {','.join(map(str, SCALING_WIDTHS))}; "
                        f"--quick: {','.join(map(str, QUICK_SCALING_WIDTHS))}; 0 skips it)")
    p.add_argument("--plot", type=Path, default=None,
                   help="sweep plot file (default: a new PNG in benchmarks/results/)")
    args = finish_args(p, p.parse_args(argv))
    args.scaling_lengths = args.scaling_lengths or list(QUICK_SCALING_LENGTHS if args.quick else SCALING_LENGTHS)
    bad = [T for T in args.scaling_lengths if T <= 0 or SCALING_TOKENS % T]
    if bad:
        p.error(f"scaling lengths must divide {SCALING_TOKENS}: {bad}")
    args.scaling_widths = args.scaling_widths or list(QUICK_SCALING_WIDTHS if args.quick else SCALING_WIDTHS)
    if args.scaling_widths == [0]:
        args.scaling_widths = []
    bad = [D for D in args.scaling_widths if D < 32 or D % 32]
    if bad:
        p.error(f"scaling widths must be multiples of 32 (heads of 32): {bad}")
    return args


def main(argv=None) -> None:
    """Run the sweep, plot it, print the crossover lengths, write the JSON."""
    args = parse_args(argv)
    machine = start(args, "scaling")
    print(f"medium, {SCALING_TOKENS} tokens per batch", flush=True)
    points = run_scaling(args)
    widths = run_width_scaling(args)
    plot = args.plot or default_path("scaling", "png")
    plot_scaling(points, widths, plot, f"medium, {SCALING_TOKENS} tokens/batch, backend {backend.name()}, "
                               f"{args.threads} threads")
    print(f"plot: {plot}")
    crossover = {n: crossover_length(make_config(n, SAMPLE_MAX_LEN)) for n in CONFIGS}
    for name, T_star in crossover.items():
        print(f"{name}: T^2 attention FLOPs equal the linear ones at T* = {T_star:.0f}")
    write_result(args, "scaling", machine, {"scaling_tokens": SCALING_TOKENS, "scaling": points, "widths": widths,
                                            "plot": str(plot), "crossover_T": crossover})


if __name__ == "__main__":
    main()
