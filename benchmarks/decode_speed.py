#!/usr/bin/env python
"""Sampling speed of ``DecoderLM``: the KV cache against re-running the whole prefix.

Run from the repository root::

    python benchmarks/decode_speed.py              # all three configs (about 2 minutes on 2 cores)
    python benchmarks/decode_speed.py --quick      # smoke test: small, 2 repeats

For each config, 64 sequences x 64 new tokens with ``sample(..., use_cache=True)``
(``model.step`` on the one new token per layer) and ``use_cache=False``
(``model.forward`` on the whole prefix at every step), timed in turns; the median
of ``--repeats`` runs of each after ``--warmup``, and uncached/cached. Results go
to a new JSON file in ``benchmarks/results/`` (``--json`` to choose).
"""
from __future__ import annotations

import dataclasses
import statistics
import sys

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:], "decode")  # before NumPy is imported (by common)

from common import (  # noqa: E402
    SAMPLE_BATCH, SAMPLE_MAX_LEN, SAMPLE_NEW, add_config_options, finish_args,
    format_table, interleaved_times, parser, sampling_model, start, write_result,
)
from minitransformer.generate import sample  # noqa: E402

def time_sampling(name: str, repeats: int, warmup: int) -> dict:
    """Median seconds to sample 64 x 64 new tokens, cached and uncached, and the ratio."""
    model = sampling_model(name)

    def run(use_cache):
        out = sample(model, batch_size=SAMPLE_BATCH, max_len=SAMPLE_MAX_LEN, rng=0, use_cache=use_cache)
        if out.shape != (SAMPLE_BATCH, SAMPLE_MAX_LEN):
            raise RuntimeError(f"sampling stopped early: got shape {out.shape}")

    times = interleaved_times({"cached": lambda: run(True), "uncached": lambda: run(False)}, repeats, warmup)
    cached, uncached = statistics.median(times["cached"]), statistics.median(times["uncached"])
    return {"config": name, "cached_s": cached, "uncached_s": uncached, "ratio": uncached / cached,
            "cached_tokens_per_s": SAMPLE_BATCH * SAMPLE_NEW / cached,
            "cached_runs_s": times["cached"], "uncached_runs_s": times["uncached"],
            "sequences": SAMPLE_BATCH, "new_tokens": SAMPLE_NEW}


TABLE_HEADER = ("config", "cached s", "uncached s", "uncached/cached", "cached new tok/s")


def table_cells(row: dict) -> list[str]:
    return [row["config"], f"{row['cached_s']:.2f}", f"{row['uncached_s']:.2f}", f"{row['ratio']:.1f}",
            f"{row['cached_tokens_per_s']:,.0f}"]


def parse_args(argv=None):
    p = parser(__doc__)
    add_config_options(p, shapes=False)
    return finish_args(p, p.parse_args(argv))


def main(argv=None) -> None:
    """Time sampling for each config, print the table, write the JSON."""
    args = parse_args(argv)
    machine = start(args, "decode_speed")
    rows = []
    for name in args.configs:
        print(f"{name}: sampling {SAMPLE_BATCH} x {SAMPLE_NEW} tokens ...", flush=True)
        rows.append(time_sampling(name, args.repeats, args.warmup))
    print()
    print(format_table(TABLE_HEADER, [table_cells(r) for r in rows]))
    print()
    write_result(args, "decode_speed", machine,
                 {"sampling": {"sequences": SAMPLE_BATCH, "new_tokens": SAMPLE_NEW}, "results": rows})


if __name__ == "__main__":
    main()
