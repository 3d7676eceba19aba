"""The recurrent models' training step, reference kernels against the fast LSTM twin, and
against the default transformer, side by side in one run ("a fast twin only
where it pays").

    python benchmarks/lstm_speed.py                # 2 threads, unpinned
    python benchmarks/lstm_speed.py --quick

The models are the ``train lm`` defaults: ``LSTMLM`` with 64-wide embeddings and 2 layers
of 256 states (0.87M weights) and the default ``DecoderLM`` (D = 128, 4 pre-LN layers,
0.81M), a vocabulary of 45 tokens, batch 32 x 64 tokens (the default recipe's), one step
= forward, cross-entropy, backward, clipping, Adam (``common.train_step``), timed in turns.
Beside them the attentional LSTM encoder-decoder of ``train seq2seq --model rnn`` (64-wide
embeddings, 2 layers of 208 states, Bahdanau's and Luong's attention), 32 sources of 64
tokens to 32 targets of 64 (its tokens/s count the targets').
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
from minitransformer.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig  # noqa: E402
from minitransformer.nn import CrossEntropyLoss  # noqa: E402
from minitransformer.optim import Adam, clip_grad_norm  # noqa: E402

V, B, T = 45, 32, 64


def _step(model, ids, kernel_set):
    optimizer = Adam(model, lr=1e-3)

    def run():
        with kernels.scope(kernel_set):
            common.train_step(model, optimizer, ids)
    return run


def _seq2seq_step(model, src, tgt):
    """The step of ``common.train_step`` for an encoder-decoder: src (B, S), tgt (B, T + 1)."""
    optimizer, loss = Adam(model, lr=1e-3), CrossEntropyLoss(ignore_index=model.config.pad_id)

    def run():
        loss(model(src, tgt[:, :-1]), tgt[:, 1:])  # (B, T, V) logits
        model.zero_grad()
        model.backward(loss.backward())
        clip_grad_norm(model, 1.0)
        optimizer.step()
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
    src = common.backend.asarray(np.random.default_rng(1).integers(3, V, size=(B, T)))  # (B, S = T)
    for kind in ("additive", "multiplicative"):
        rnn = RNNSeq2SeqConfig(V, V, max_len=T + 1, d_model=64, hidden=208, n_layers=2, attention=kind)
        tasks[f"RNNSeq2Seq ({kind}), fast kernels"] = _seq2seq_step(RNNSeq2Seq(rnn), src, ids)
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
