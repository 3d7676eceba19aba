#!/usr/bin/env python
"""Peak memory of one ``DecoderLM`` training step.

Run from the repository root::

    python benchmarks/memory.py                # all configs and shapes (under a minute on 2 cores)
    python benchmarks/memory.py --quick        # small, 64x64
    python benchmarks/memory.py --configs medium --shapes 32x128,16x256

NumPy: ``tracemalloc`` from before the model is built, one warm-up step, then the
highest total of live NumPy memory during one measured step. CuPy: the memory
pool's high-water mark (an upper bound). Memory does not depend on machine load.
Results go to a new JSON file in ``benchmarks/results/`` (``--json`` to choose).
"""
from __future__ import annotations

import resource
import sys
import tracemalloc

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

from common import (  # noqa: E402
    add_config_options, build, finish_args, format_table, make_batch, make_config, mb, parser, start,
    train_step, write_result,
)
from minitransformer import backend, devices  # noqa: E402
from minitransformer.backend import xp  # noqa: E402


def peak_step_memory(cfg, B, T) -> dict:
    """Peak memory during one training step, after one warm-up step.

    NumPy (and the strict stand-in): ``tracemalloc`` runs from before the model is
    built, so it sees every NumPy buffer: weights, gradients, Adam's m and v, the
    activations cached by the previous step, and the step's own temporaries.
    ``peak_bytes`` is the highest total during the measured step and
    ``before_step_bytes`` the total when it starts. (Timing runs are separate:
    tracemalloc slows allocation.)

    CuPy: the default memory pool never hands blocks back on its own, so after
    ``free_all_blocks()`` its ``total_bytes()`` can only grow, and after the step
    it is the pool's high-water mark: the peak, rounded up by block sizes and
    fragmentation (an upper bound). ``before_step_bytes`` is ``used_bytes()``.
    """
    if backend.name() == "cupy":
        pool = xp.get_default_memory_pool()
        model, optimizer = build(cfg)
        ids = make_batch(B, T, cfg)
        train_step(model, optimizer, ids)
        devices.synchronize()
        pool.free_all_blocks()
        before = pool.used_bytes()
        train_step(model, optimizer, ids)
        devices.synchronize()
        return {"method": "cupy pool total_bytes after free_all_blocks", "peak_bytes": pool.total_bytes(),
                "before_step_bytes": before}
    tracemalloc.start()
    try:
        model, optimizer = build(cfg)
        ids = make_batch(B, T, cfg)
        train_step(model, optimizer, ids)
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        train_step(model, optimizer, ids)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {"method": "tracemalloc", "peak_bytes": peak, "before_step_bytes": before}


def max_rss_mb() -> float:
    """The process's resident-set high-water mark (ru_maxrss, KiB on Linux), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


TABLE_HEADER = ("config", "B x T", "peak MB", "at step start MB", "step's own MB")


def table_cells(row: dict) -> list[str]:
    m = row["memory"]
    return [row["config"], f"{row['B']}x{row['T']}", f"{mb(m['peak_bytes']):.1f}",
            f"{mb(m['before_step_bytes']):.1f}", f"{mb(m['peak_bytes'] - m['before_step_bytes']):.1f}"]


def parse_args(argv=None):
    p = parser(__doc__, timing=False)
    add_config_options(p)
    return finish_args(p, p.parse_args(argv))


def main(argv=None) -> None:
    """Measure each (config, shape), print the table, write the JSON."""
    args = parse_args(argv)
    machine = start(args, "memory")
    rows = []
    for name in args.configs:
        for B, T in args.shapes:
            print(f"{name}: {B}x{T} ...", flush=True)
            rows.append({"config": name, "B": B, "T": T, "memory": peak_step_memory(make_config(name, T), B, T)})
    print()
    print(format_table(TABLE_HEADER, [table_cells(r) for r in rows]))
    rss = max_rss_mb()
    print(f"\nru_maxrss (process high-water mark over all runs, for reference): {rss:.0f} MB")
    write_result(args, "memory", machine, {"results": rows, "ru_maxrss_mb": rss})


if __name__ == "__main__":
    main()
