"""Batch planning (minitransformer.train.batches): every example once per epoch, similar
lengths together, padding trimmed per batch."""
from __future__ import annotations

import numpy as np
import pytest

from minitransformer.optim import Adam
from minitransformer.train.tasks import LMTask, Seq2SeqTask
from minitransformer.train import fit, plan_batches
from train_helpers import cfg, lm_data, lm_model, s2s_data, s2s_model, WrappedTask


# ---------------------------------------------------------------------------
# batching
# ---------------------------------------------------------------------------
def test_plan_batches_covers_every_index_once():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=1003)
    for bucket in (True, False):
        batches = plan_batches(lengths, 16, np.random.default_rng(1), bucket=bucket)
        flat = np.concatenate(batches)
        assert sorted(flat.tolist()) == list(range(1003))
        assert all(len(b) == 16 for b in batches if len(b) != 1003 % 16)
        assert sum(len(b) < 16 for b in batches) == 1  # only one short batch (1003 = 62 * 16 + 11)


def test_plan_batches_groups_similar_lengths():
    lengths = np.random.default_rng(0).integers(1, 100, size=1600)

    def spread(batches):
        return np.mean([lengths[b].max() - lengths[b].min() for b in batches])

    bucketed = spread(plan_batches(lengths, 16, np.random.default_rng(3), bucket=True))
    mixed = spread(plan_batches(lengths, 16, np.random.default_rng(3), bucket=False))
    assert bucketed < 5 and mixed > 50
    # padding saved: total padded tokens
    def padded(batches):
        return sum(len(b) * lengths[b].max() for b in batches)
    assert padded(plan_batches(lengths, 16, np.random.default_rng(3))) < 0.7 * padded(
        plan_batches(lengths, 16, np.random.default_rng(3), bucket=False))


def test_batches_differ_between_epochs_and_repeat_per_seed():
    """Observed through the trainer: every epoch covers each example exactly once, in a
    different grouping and order; the same seed gives the same plan."""
    data = lm_data(48, lo=1, hi=12)

    def epochs_of(seed):
        task = WrappedTask(LMTask())
        model = lm_model()
        fit(model, task, Adam(model), data, config=cfg(epochs=2, seed=seed))
        position = {id(e): i for i, e in enumerate(data)}  # the trainer passes the objects themselves
        batches = [[position[id(e)] for e in ex] for ex, _ in task.collated]
        return batches[:6], batches[6:]

    e1, e2 = epochs_of(0)
    for epoch in (e1, e2):
        assert sorted(i for b in epoch for i in b) == list(range(48))
    assert e1 != e2
    assert {frozenset(b) for b in e1} != {frozenset(b) for b in e2}  # regrouped, not just reordered
    assert epochs_of(0) == (e1, e2)
    assert epochs_of(1)[0] != e1


def test_plan_batches_empty_and_small():
    assert plan_batches([], 4, np.random.default_rng(0)) == []
    (only,) = plan_batches([3, 1, 2], 8, np.random.default_rng(0))
    assert sorted(only.tolist()) == [0, 1, 2]


@pytest.mark.parametrize("kind", ["lm", "s2s"])
def test_padding_is_trimmed_per_batch(kind):
    data = lm_data(64, lo=1, hi=14) if kind == "lm" else s2s_data(64)
    base = LMTask() if kind == "lm" else Seq2SeqTask()
    task = WrappedTask(base)
    model = lm_model() if kind == "lm" else s2s_model()
    fit(model, task, Adam(model), data, config=cfg(epochs=2))
    widths = set()
    for examples, batch in task.collated:
        if kind == "lm":
            assert batch.shape == (len(examples), max(len(e) for e in examples))
            widths.add(batch.shape[1])
        else:
            src, tgt = batch
            assert src.shape[1] == max(len(e[0]) for e in examples)
            assert tgt.shape[1] == max(len(e[1]) for e in examples)
            widths.add(src.shape[1])
    assert len(widths) > 2  # batches really have different widths
