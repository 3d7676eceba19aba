"""Learning tests: small models really learn small tasks.

Gradient checks prove each backward pass in isolation; these prove that the
pieces (masks, backward passes, optimizers, schedules, the training loop and
decoding) work *together*. Each runs in float32 NumPy on a CPU in seconds.

* Seq2Seq learns to reverse digit strings (greedy decoding on held-out strings).
* DecoderLM memorizes a tiny corpus (training loss near zero, exact regeneration).
* Encoder + MLM recovers the masked tokens of a tiny repetitive corpus.

BLAS threads: the matrices here are tiny (at most a few hundred rows), where
multithreaded BLAS gives no speedup but on a busy machine (parallel test runs,
CI runners sharing cores) spinning BLAS threads can make every matmul 10-50x
slower. The fixture below asks OpenBLAS, if that is what NumPy uses, for one
thread while this module runs, and restores the previous count afterwards.
"""
from __future__ import annotations

import ctypes
import time

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.generate import greedy
from minitransformer.models import DecoderLM, DecoderLMConfig, EncoderConfig, MaskedLM, Seq2Seq, Seq2SeqConfig
from minitransformer.optim import Adam, WarmupCosineLR
from minitransformer.train.tasks import LMTask, MLMTask, Seq2SeqTask
from minitransformer.train import TrainConfig, fit

PAD, BOS, EOS, MASK = 0, 1, 2, 3


# ---------------------------------------------------------------------------
# one BLAS thread (best effort; a no-op where OpenBLAS is not found)
# ---------------------------------------------------------------------------
def _openblas_thread_controls():
    """(get, set) functions of the OpenBLAS that NumPy loaded, or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for suffix in ("64_", "_64_", "", "64"):
            for prefix in ("scipy_openblas", "openblas"):
                getter = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                setter = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if getter is not None and setter is not None:
                    getter.restype = ctypes.c_int
                    setter.argtypes = [ctypes.c_int]
                    return getter, setter
    return None


@pytest.fixture(scope="module", autouse=True)
def _one_blas_thread():
    controls = _openblas_thread_controls()
    if controls is None:
        yield
        return
    get, set_ = controls
    before = get()
    set_(1)
    try:
        yield
    finally:
        set_(before)


def _report(request, **values):
    """Print (visible with -s) and attach to the test report (junit XML) the numbers."""
    for k, v in values.items():
        request.node.user_properties.append((k, v))
    print(f"\n{request.node.name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))


# ---------------------------------------------------------------------------
# Seq2Seq: reverse digit strings
# ---------------------------------------------------------------------------
DIGIT0 = 3  # digits 0-9 are ids 3..12
REV_VOCAB = DIGIT0 + 10


def reversal_examples(rng, n):
    out = []
    for _ in range(n):
        digits = [int(d) for d in rng.integers(DIGIT0, DIGIT0 + 10, size=int(rng.integers(5, 9)))]
        out.append(([BOS] + digits + [EOS], [BOS] + digits[::-1] + [EOS]))
    return out


def test_seq2seq_learns_to_reverse_digit_strings(request):
    """2+2 pre-LN layers, D=64, 4 heads; 10 epochs of 1024 fresh strings (320 Adam
    steps with warmup and cosine decay). Greedy decoding of 500 held-out strings."""
    t0 = time.perf_counter()
    seed, epochs, per_epoch, batch = 0, 10, 1024, 32

    def train_data(epoch):  # fresh strings every epoch, deterministic in the epoch
        return reversal_examples(np.random.default_rng([seed, epoch]), per_epoch)

    seen = {tuple(src) for e in range(epochs) for src, _ in train_data(e)}
    held_out = [ex for ex in reversal_examples(np.random.default_rng([seed, 10_000]), 600)
                if tuple(ex[0]) not in seen][:500]
    assert len(held_out) == 500

    cfg = Seq2SeqConfig(src_vocab_size=REV_VOCAB, tgt_vocab_size=REV_VOCAB, max_len=16, d_model=64, n_heads=4,
                        n_enc_layers=2, n_dec_layers=2, d_ff=128, norm="pre", pos="sinusoidal", seed=seed)
    model = Seq2Seq(cfg)
    steps = epochs * per_epoch // batch
    opt = Adam(model, lr=WarmupCosineLR(3e-3, warmup=30, total=steps, min_lr=1.5e-4))
    task = Seq2SeqTask(pad_id=PAD)
    trainer = fit(model, task, opt, train_data, val_data=held_out[:100],
                  config=TrainConfig(epochs=epochs, batch_size=batch, clip=1.0, quiet=True, seed=seed))
    train_s = time.perf_counter() - t0
    assert trainer.step == steps

    src, tgt = task.collate(held_out)
    pred = greedy(model, src=src, max_len=tgt.shape[1] + 2)  # (B, T_out), BOS first
    width = max(pred.shape[1], tgt.shape[1])
    pred = np.pad(pred, ((0, 0), (0, width - pred.shape[1])), constant_values=PAD)
    tgt = np.pad(tgt, ((0, 0), (0, width - tgt.shape[1])), constant_values=PAD)
    exact = float((pred == tgt).all(axis=1).mean())
    total_s = time.perf_counter() - t0
    _report(request, exact_match=round(exact, 4), val_acc=round(trainer.history[-1]["val_acc"], 4),
            train_s=round(train_s, 1), total_s=round(total_s, 1))
    assert exact >= 0.95, f"greedy exact match {exact:.3f} on held-out strings (history: {trainer.history[-1]})"


# ---------------------------------------------------------------------------
# DecoderLM: memorize a tiny corpus
# ---------------------------------------------------------------------------
def test_decoder_lm_memorizes_tiny_corpus(request):
    """8 sequences of 6-9 content tokens, each opened by its own start token (the
    first token is only ever input, never a target, so the corpus is fully
    determined and the loss can go to zero)."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(0)
    n_seq, first_content = 8, 4 + 8  # start tokens 4..11, content tokens 12..27
    vocab = first_content + 16
    corpus = [[4 + i] + [int(t) for t in rng.integers(first_content, vocab, size=int(rng.integers(6, 10)))] + [EOS]
              for i in range(n_seq)]
    cfg = DecoderLMConfig(vocab_size=vocab, max_len=16, d_model=32, n_heads=4, n_layers=2, d_ff=64, seed=0)
    model = DecoderLM(cfg)
    opt = Adam(model, lr=WarmupCosineLR(1e-2, warmup=10, total=200, min_lr=1e-3))
    task = LMTask(pad_id=PAD)
    trainer = fit(model, task, opt, corpus * 4, val_data=corpus,
                  config=TrainConfig(epochs=50, batch_size=8, clip=1.0, quiet=True))
    final = trainer.history[-1]
    ev = task.evaluate(model.eval(), [task.collate(corpus)])
    out = greedy(model, prompt=np.array([[c[0]] for c in corpus]), max_len=12)  # (8, T)
    regenerated = sum(list(row[:len(c)]) == c for row, c in zip(out, corpus))
    _report(request, train_loss=round(final["train_loss"], 5), val_loss=round(ev["val_loss"], 5),
            steps=trainer.step, regenerated=regenerated, total_s=round(time.perf_counter() - t0, 1))
    assert final["train_loss"] < 0.05
    assert ev["val_loss"] < 0.05 and ev["val_acc"] == 1.0
    assert regenerated == n_seq


# ---------------------------------------------------------------------------
# Encoder + MLM: fill in masked tokens
# ---------------------------------------------------------------------------
def test_encoder_mlm_recovers_masked_tokens(request):
    """8 fixed sentences of 12 tokens, seen 16 times per epoch with fresh 80/10/10
    corruption each time; accuracy on the selected positions of a differently
    corrupted copy of the corpus."""
    t0 = time.perf_counter()
    rng = np.random.default_rng(1)
    vocab = 4 + 20
    corpus = [[BOS] + [int(t) for t in rng.integers(4, vocab, size=12)] + [EOS] for _ in range(8)]
    cfg = EncoderConfig(vocab_size=vocab, max_len=16, d_model=32, n_heads=4, n_layers=2, d_ff=64, seed=0)
    model = MaskedLM(cfg)
    task = MLMTask(mask_id=MASK, vocab_size=vocab, pad_id=PAD, special_ids=(PAD, BOS, EOS), p=0.15)
    opt = Adam(model, lr=WarmupCosineLR(5e-3, warmup=10, total=240, min_lr=5e-4))
    trainer = fit(model, task, opt, corpus * 16, val_data=corpus * 8,
                  config=TrainConfig(epochs=60, batch_size=32, clip=1.0, quiet=True))
    ev = trainer.history[-1]
    # a second, independent corruption of the corpus
    batch = task.collate(corpus * 16)
    corrupted, targets = task._corrupt(batch, np.random.default_rng(777))
    logits = backend.to_numpy(model.eval()(backend.asarray(corrupted)))
    sel = targets != MLMTask.IGNORE
    acc2 = float((logits.argmax(-1)[sel] == targets[sel]).mean())
    _report(request, val_acc=round(ev["val_acc"], 4), val_tokens=ev["val_tokens"], acc_fresh=round(acc2, 4),
            steps=trainer.step, total_s=round(time.perf_counter() - t0, 1))
    assert ev["val_tokens"] > 100 and sel.sum() > 200
    assert ev["val_acc"] >= 0.9
    assert acc2 >= 0.9
