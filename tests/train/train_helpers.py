"""Shared by the tests of minitransformer.train: tiny models of each family, their data and
tasks, config shorthand, weight comparison, and a task wrapper that injects faults."""
from __future__ import annotations

import numpy as np

from minitransformer.models import DecoderLM, DecoderLMConfig, EncoderConfig, MaskedLM, Seq2Seq, Seq2SeqConfig
from minitransformer.train.tasks import MLMTask
from minitransformer.train import TrainConfig

PAD, BOS, EOS, MASK = 0, 1, 2, 3
V = 13


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def lm_data(n=24, seed=0, lo=2, hi=9):
    rng = np.random.default_rng(seed)
    return [[BOS] + [int(t) for t in rng.integers(4, V, size=rng.integers(lo, hi))] + [EOS] for _ in range(n)]


def s2s_data(n=24, seed=0):
    return [(s, [BOS] + s[1:-1][::-1] + [EOS]) for s in lm_data(n, seed)]


def lm_model(seed=0, dropout=0.0, **kw):
    cfg = DecoderLMConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2, d_ff=32, seed=seed,
                          emb_dropout=dropout, attn_dropout=dropout, resid_dropout=dropout, ff_dropout=dropout,
                          **kw)
    return DecoderLM(cfg)


def mlm_model(seed=0, dropout=0.0):
    return MaskedLM(EncoderConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                                  seed=seed, emb_dropout=dropout, resid_dropout=dropout))


def s2s_model(seed=0, dropout=0.0):
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, max_len=16, d_model=16, n_heads=2,
                                 n_enc_layers=1, n_dec_layers=1, d_ff=32, seed=seed,
                                 emb_dropout=dropout, attn_dropout=dropout, resid_dropout=dropout))


def mlm_task():
    return MLMTask(mask_id=MASK, vocab_size=V, special_ids=(PAD, BOS, EOS), p=0.3)


def weights(model):
    return {k: v.copy() for k, v in model.state_dict().items()}


def assert_same_weights(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def saved_files(folder):
    """The names of the files in ``folder`` (none if it does not exist)."""
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def cfg(**kw):
    base = dict(epochs=3, batch_size=8, quiet=True, seed=0)
    base.update(kw)
    return TrainConfig(**base)


class WrappedTask:
    """Delegates to a real task; ``hook(step_number)`` runs before each training loss
    (1-based count of loss calls) and may raise or return a replacement loss."""

    def __init__(self, task, hook=None):
        self.task, self.hook, self.calls = task, hook, 0
        self.collated = []

    def length(self, e):
        return self.task.length(e)

    def collate(self, examples):
        batch = self.task.collate(examples)
        self.collated.append((list(examples), batch))
        return batch

    def loss(self, model, batch, rng=None):
        self.calls += 1
        out = self.task.loss(model, batch, rng)
        if self.hook is not None:
            replaced = self.hook(self.calls, model)
            if replaced is not None:
                return replaced, out[1]
        return out

    def backward(self, model):
        self.task.backward(model)

    def evaluate(self, model, batches):
        return self.task.evaluate(model, batches)


