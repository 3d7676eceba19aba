"""One small training run, for tests/test_distributed.py: started under ``mpiexec -n R``
(data-parallel over R ranks) or as a plain process (one rank, no MPI).

    python tests/distributed_run.py MODEL STEPS OUT.npz [--resume CKPT] [--out-dir DIR] [--smoothing EPS]

MODEL is ``lm`` (DecoderLM) or ``s2s`` (Seq2Seq). Float64, batch size 8 (the global
batch: each of R ranks reads its shard), examples of different lengths (padding),
Adam with a warm-up schedule and clipping at 1.0. Rank 0 (or the one process) saves
every weight to OUT.npz; every rank also checks that its weights equal rank 0's.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from minitransformer import backend, distributed
from minitransformer.models import DecoderLM, DecoderLMConfig, Seq2Seq, Seq2SeqConfig
from minitransformer.optim import Adam, WarmupCosineLR
from minitransformer.train.tasks import LMTask, Seq2SeqTask
from minitransformer.train import TrainConfig, fit

PAD, BOS, EOS, V = 0, 1, 2, 13


def lm_data(n=40, seed=0):
    rng = np.random.default_rng(seed)
    return [[BOS] + [int(t) for t in rng.integers(4, V, size=rng.integers(1, 12))] + [EOS] for _ in range(n)]


def _failing(task, my_rank: int, rank: int, step: int):
    """The task, whose loss raises on ``rank`` at its ``step``-th call (an injected fault)."""
    calls = [0]
    loss = task.loss

    def failing_loss(*a, **k):
        calls[0] += 1
        if my_rank == rank and calls[0] == step:
            raise RuntimeError(f"injected fault at step {step}")
        return loss(*a, **k)

    task.loss = failing_loss
    return task


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", choices=["lm", "s2s"])
    p.add_argument("steps", type=int)
    p.add_argument("out")
    p.add_argument("--resume")
    p.add_argument("--out-dir")
    p.add_argument("--smoothing", type=float, default=0.0)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--examples", type=int, default=40)
    p.add_argument("--loss-norm", default="batch", choices=["batch", "epoch"], help="TrainConfig.loss_norm")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--max-time", type=float, default=None, help="TrainConfig.max_time (seconds)")
    p.add_argument("--late", type=float, default=0.0, help="rank 0 starts this many seconds late")
    p.add_argument("--fail", type=int, nargs=2, metavar=("RANK", "STEP"), help="raise on this rank at this step")
    args = p.parse_args()
    parallel = distributed.DataParallel() if distributed.world_size() > 1 else None
    with backend.dtype_scope("float64"):
        if args.model == "lm":
            model = DecoderLM(DecoderLMConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                                              attn_dropout=args.dropout, resid_dropout=args.dropout))
            task, data = LMTask(PAD, args.smoothing), lm_data(args.examples)
        else:
            model = Seq2Seq(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, max_len=16, d_model=16, n_heads=2,
                                          n_enc_layers=2, n_dec_layers=2, d_ff=32))
            task, data = Seq2SeqTask(PAD, args.smoothing), [(s, [BOS] + s[1:-1][::-1] + [EOS]) for s in lm_data()]
        if args.fail:
            task = _failing(task, parallel.rank if parallel else 0, *args.fail)
        opt = Adam(model, lr=WarmupCosineLR(lr=3e-3, warmup=3, total=20))
        config = TrainConfig(epochs=args.epochs, batch_size=8, max_steps=args.steps, clip=1.0, quiet=True, seed=0,
                             out_dir=args.out_dir, max_time=args.max_time, loss_norm=args.loss_norm)
        if parallel is not None and parallel.rank == 0:
            time.sleep(args.late)  # rank 0 starts its clock later than the other ranks
        trainer = fit(model, task, opt, data, config=config, resume=args.resume, parallel=parallel)
    # each rank's own record of how far it trained (a file, so that no collective is needed to compare)
    with open(f"{args.out}.rank{0 if parallel is None else parallel.rank}.steps", "w") as f:
        f.write(f"{trainer.step} {trainer.stop_reason}\n")
    if parallel is not None and model.rng.stream != parallel.rank:
        parallel.abort(4)  # each rank must draw its dropout masks from its own stream
    weights = {name: backend.to_numpy(p.data) for name, p in model.named_parameters()}
    if parallel is not None:  # every rank must hold rank 0's weights, bit for bit
        flat = np.concatenate([w.reshape(-1) for w in weights.values()])
        root = parallel.comm.bcast(flat if parallel.rank == 0 else None, root=0)
        if not np.array_equal(flat, root):
            print(f"rank {parallel.rank}: weights differ from rank 0's by {np.abs(flat - root).max():.3g}",
                  file=sys.stderr, flush=True)
            parallel.abort(3)
    if parallel is None or parallel.is_writer:
        np.savez(args.out, **weights)


if __name__ == "__main__":
    main()
