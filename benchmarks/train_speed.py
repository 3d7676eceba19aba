#!/usr/bin/env python
"""Training and forward speed of ``DecoderLM``, and how close each comes to the speed
of its matrix products alone (the GEMM limit).

Run from the repository root::

    python benchmarks/train_speed.py                 # all configs and shapes (about 5 minutes on 2 cores)
    python benchmarks/train_speed.py --quick         # smoke test: small, 64x64, 2 repeats
    python benchmarks/train_speed.py --configs medium --shapes 32x128 --show-gemms
    python benchmarks/train_speed.py --list-gemms    # the matmuls of a step, untimed
    python benchmarks/train_speed.py --check-gemms   # that list against a real step

For every (config, shape), each the median of ``--repeats`` runs after
``--warmup``, all timed in turns:

* training tokens/s: forward + cross-entropy + backward + gradient clipping +
  Adam step, float32, the model in training mode (dropout as its config says);
* forward-only tokens/s: the model's forward pass (logits) in eval mode;
* the GEMM limit: every ``xp.matmul`` of the step at the model's exact shapes and
  memory layouts (gemms.py), giving GEMM-bound tokens/s = tokens per step / sum
  of matmul times, and achieved/limit.

Results go to a new JSON file in ``benchmarks/results/`` (``--json`` to choose).
See ``benchmarks/README.md`` for the exact definitions.
"""
from __future__ import annotations

import statistics
import sys

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

from common import (  # noqa: E402
    DecoderLM, DecoderLMConfig, add_config_options, build, finish_args, format_table, forward_only,
    interleaved_times, make_batch, make_config, parser, start, train_step, write_result,
)
from gemms import (  # noqa: E402
    check_gemm_list, format_gemm_list, forward_flops_per_layer, gemm_summary, gemm_task, step_gemms,
)
from minitransformer import backend  # noqa: E402


def measure(cfg: DecoderLMConfig, B: int, T: int, repeats: int, warmup: int, forward: bool = True) -> dict:
    """Time, in turns (see ``common.interleaved_times``): the training step, the
    forward pass (if ``forward``) and every product of ``gemms.step_gemms``.

    Returns the medians ``train_s`` and ``fwd_s`` (None without ``forward``), every
    run's seconds (``*_runs_s``) and ``gemm_limit`` (see ``gemms.gemm_summary``).
    """
    model, optimizer = build(cfg)
    ids = make_batch(B, T, cfg)
    tasks = {"train": lambda: train_step(model, optimizer, ids)}
    if forward:
        eval_model = DecoderLM(cfg).eval()  # dropout off; its own caches, so train is undisturbed
        tasks["fwd"] = lambda: forward_only(eval_model, ids)
    gemms = step_gemms(cfg, B, T)
    rng, inners = backend.RNG(1234), []
    for i, g in enumerate(gemms):
        tasks[i], inner = gemm_task(g, rng)
        inners.append(inner)
    times = interleaved_times(tasks, repeats, warmup)
    gemm_seconds = [statistics.median(times[i]) / inner for i, inner in enumerate(inners)]
    return {"train_s": statistics.median(times["train"]), "train_runs_s": times["train"],
            "fwd_s": statistics.median(times["fwd"]) if forward else None,
            "fwd_runs_s": times.get("fwd"), "gemm_limit": gemm_summary(gemms, gemm_seconds, B * T)}


def bench_row(name: str, B: int, T: int, args) -> dict:
    """Every speed measurement of one (config, shape)."""
    cfg = make_config(name, T)
    tokens = B * T
    timed = measure(cfg, B, T, args.repeats, args.warmup)
    train_s, fwd_s, limit = timed["train_s"], timed["fwd_s"], timed["gemm_limit"]
    flops = forward_flops_per_layer(cfg, B, T)
    return {
        "config": name, "B": B, "T": T, "tokens_per_step": tokens, "model": cfg.to_dict(),
        "parameters": DecoderLM(cfg).num_parameters(),
        "train_step_s": train_s, "train_tokens_per_s": tokens / train_s, "train_runs_s": timed["train_runs_s"],
        "fwd_s": fwd_s, "fwd_tokens_per_s": tokens / fwd_s, "fwd_runs_s": timed["fwd_runs_s"],
        "gemm_limit": limit,
        "train_achieved_over_limit": limit["train_seconds"] / train_s,
        "fwd_achieved_over_limit": limit["fwd_seconds"] / fwd_s,
        "forward_flops_per_layer": flops, "t2_over_linear": flops["t2"] / flops["linear"],
    }


TABLE_HEADER = ("config", "B x T", "train tok/s", "fwd tok/s", "GEMM-limit train tok/s",
                "GEMM-limit fwd tok/s", "train achieved/limit", "fwd achieved/limit")


def table_cells(row: dict) -> list[str]:
    """One result row as the table's text cells."""
    lim = row["gemm_limit"]
    return [row["config"], f"{row['B']}x{row['T']}", f"{row['train_tokens_per_s']:,.0f}",
            f"{row['fwd_tokens_per_s']:,.0f}", f"{lim['train_tokens_per_s']:,.0f}",
            f"{lim['fwd_tokens_per_s']:,.0f}", f"{row['train_achieved_over_limit']:.2f}",
            f"{row['fwd_achieved_over_limit']:.2f}"]


def format_gemms(row: dict) -> str:
    """The per-product breakdown of one row's GEMM limit."""
    out = [f"GEMMs of one training step, {row['config']} {row['B']}x{row['T']} (ms include x count):"]
    for g in row["gemm_limit"]["gemms"]:
        out.append(f"  {g['name']:24s} {g['phase']}  {str(tuple(g['a'])):20s} {g['a_layout']:5s} @ "
                   f"{str(tuple(g['b'])):20s} {g['b_layout']:5s} x{g['count']:<2d} "
                   f"{g['seconds'] * 1e3:8.2f} ms {g['gflop_per_s']:7.1f} GFLOP/s")
    return "\n".join(out)


def parse_args(argv=None):
    p = parser(__doc__)
    add_config_options(p)
    p.add_argument("--show-gemms", action="store_true", help="print each row's per-GEMM timings")
    p.add_argument("--check-gemms", action="store_true",
                   help="check the matmul list against one recorded step (strict backend), and exit")
    p.add_argument("--list-gemms", action="store_true",
                   help="print the matmuls of one step for each config and shape, and exit (no timing)")
    return finish_args(p, p.parse_args(argv))


def main(argv=None) -> None:
    """Run the benchmark, print the table, write the JSON."""
    args = parse_args(argv)
    if args.list_gemms:
        for name in args.configs:
            for B, T in args.shapes:
                print(format_gemm_list(name, B, T))
        return
    if args.check_gemms:
        ok = all([check_gemm_list(name, B, T) for name in args.configs for B, T in args.shapes])
        sys.exit(0 if ok else 1)
    machine = start(args, "train_speed")
    rows = []
    for name in args.configs:
        for B, T in args.shapes:
            print(f"{name}: {B}x{T} ...", flush=True)
            rows.append(bench_row(name, B, T, args))
            if args.show_gemms:
                print(format_gemms(rows[-1]))
    print()
    print(format_table(TABLE_HEADER, [table_cells(r) for r in rows]))
    print()
    write_result(args, "train_speed", machine, {"results": rows})


if __name__ == "__main__":
    main()
