"""The recurrent models' training step, reference kernels against the fast LSTM twin, and
against the default transformer, side by side in one run (issue 30: "a fast twin only
where it pays").

    python benchmarks/lstm_speed.py                # 2 threads, unpinned
    python benchmarks/lstm_speed.py --quick

The models are the ``train lm`` defaults: ``LSTMLM`` with 64-wide embeddings and 2 layers
of 256 states (0.87M weights) and the default ``DecoderLM`` (D = 128, 4 pre-LN layers,
0.81M), a vocabulary of 45 tokens, batch 32 x 64 tokens (the default recipe's), one step
= forward, cross-entropy, backward, clipping, Adam (``common.train_step``), timed in turns.
"""
from __future__ import annotations

import sys

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:])  # before NumPy is imported (by common)

import statistics  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402
from minitransformer import kernels  # noqa: E402
from minitransformer.models import DecoderLM, DecoderLMConfig  # noqa: E402
from minitransformer.models.lstm_lm import LSTMLM, LSTMLMConfig  # noqa: E402
from minitransformer.optim import Adam  # noqa: E402

V, B, T = 45, 32, 64


def _step(model, ids, kernel_set):
    optimizer = Adam(model, lr=1e-3)

    def run():
        with kernels.scope(kernel_set):
            common.train_step(model, optimizer, ids)
    return run


def main(argv=None) -> None:
    p = common.parser(__doc__)
    args = common.finish_args(p, p.parse_args(argv))
    machine = common.start(args, "lstm_speed")
    ids = np.random.default_rng(0).integers(3, V, size=(B, T + 1))
    ids[:, 0] = 1
    ids = common.backend.asarray(ids)
    lstm = LSTMLMConfig(V, d_model=64, hidden=256, n_layers=2, max_len=T + 1)
    transformer = DecoderLMConfig(V, max_len=T + 1, n_layers=4, pos="learned", tie_embeddings=True,
                                  d_model=128, n_heads=4, d_ff=512, norm="pre", activation="gelu")
    tasks = {"LSTMLM, reference kernels": _step(LSTMLM(lstm), ids, "reference"),
             "LSTMLM, fast kernels": _step(LSTMLM(lstm), ids, "fast"),
             "DecoderLM, fast kernels": _step(DecoderLM(transformer), ids, "fast")}
    times = common.interleaved_times(tasks, args.repeats, args.warmup)
    rows = []
    for name, ts in times.items():
        med = statistics.median(ts)
        rows.append({"task": name, "median_s": med, "tokens_per_s": B * T / med, "times": ts})
    base = rows[0]["median_s"]
    print(common.format_table(("step", "ms", "tokens/s", "speed vs reference LSTM"),
                              [[r["task"], f"{1e3 * r['median_s']:.1f}", f"{r['tokens_per_s']:,.0f}",
                                f"{base / r['median_s']:.2f}"] for r in rows]))
    common.write_result(args, "lstm_speed", machine, {"B": B, "T": T, "rows": rows})


if __name__ == "__main__":
    main()
