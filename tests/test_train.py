"""Tests for minitransformer.train: reproducibility, exact resume, batching, early
stopping, history, divergence and interruption handling, stopping rules."""
from __future__ import annotations

import json
import math

import numpy as np
import sys

import pytest

from minitransformer import backend
from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint, save_checkpoint
from minitransformer.models import DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, Seq2Seq, Seq2SeqConfig
from minitransformer.optim import SGD, Adam, AdamW, NoamLR, WarmupCosineLR
from minitransformer.tasks import LMTask, MLMTask, Seq2SeqTask
from minitransformer.train import TrainConfig, TrainingDiverged, fit, plan_batches

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
    return Encoder(EncoderConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=2, d_ff=32,
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


# ---------------------------------------------------------------------------
# reproducibility
# ---------------------------------------------------------------------------
def test_same_seed_same_losses():
    def run(seed):
        model = lm_model(seed=1, dropout=0.1)
        tr = fit(model, LMTask(), Adam(model, lr=3e-3), lm_data(), config=cfg(epochs=2, seed=seed))
        return tr.step_losses, weights(model)

    l1, w1 = run(0)
    l2, w2 = run(0)
    l3, _ = run(1)
    assert len(l1) == 6 and l1 == l2
    assert_same_weights(w1, w2)
    assert l3 != l1  # another seed, another batch order


def test_training_reduces_the_loss():
    model = lm_model()
    data = lm_data(16)
    tr = fit(model, LMTask(), Adam(model, lr=1e-2), data, val_data=data, config=cfg(epochs=8))
    assert tr.history[-1]["val_loss"] < tr.history[0]["val_loss"] - 0.3
    assert tr.history[-1]["train_loss"] < tr.history[0]["train_loss"]
    assert tr.stop_reason == "epochs" and len(tr.history) == 8


# ---------------------------------------------------------------------------
# exact resume
# ---------------------------------------------------------------------------
SETUPS = {
    # name: (model factory, task factory, data, optimizer factory)
    "lm_dropout_schedule": (lambda s: lm_model(seed=s, dropout=0.2), LMTask, lm_data(24),
                            lambda m: AdamW(m, lr=WarmupCosineLR(5e-3, warmup=3, total=12), weight_decay=0.1)),
    "mlm_corruption_noam": (lambda s: mlm_model(seed=s, dropout=0.1), mlm_task, lm_data(24),
                            lambda m: Adam(m, lr=NoamLR(16, warmup=4))),
    "seq2seq_dropout_sgd": (lambda s: s2s_model(seed=s, dropout=0.1), Seq2SeqTask, s2s_data(24),
                            lambda m: SGD(m, lr=0.05, momentum=0.9, nesterov=True)),
    "lm_callable_data": (lambda s: lm_model(seed=s, dropout=0.1), LMTask, lambda epoch: lm_data(24, seed=epoch),
                         lambda m: Adam(m, lr=WarmupCosineLR(5e-3, warmup=2, total=12))),
}


@pytest.mark.parametrize("split, total", [(2, 4), (3, 4), (4, 8), (1, 7)],
                         ids=["mid_epoch", "at_epoch_end", "across_boundary", "one_then_two_epochs"])
@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_resume_is_exact(tmp_path, setup, split, total):
    """Train `total` steps straight vs. `split` steps, save, resume in a brand-new
    model/optimizer (different init seed) and train to `total`: the per-step losses and
    final weights are bitwise identical. 24 examples / batch 8 = 3 steps per epoch."""
    make_model, make_task, data, make_opt = SETUPS[setup]
    val = lm_data(6, seed=100) if make_task is not Seq2SeqTask else s2s_data(6, seed=100)

    model_a = make_model(0)
    opt_a = make_opt(model_a)
    straight = fit(model_a, make_task(), opt_a, data, val, config=cfg(epochs=5, max_steps=total,
                                                                         out_dir=str(tmp_path / "a")))
    assert len(straight.step_losses) == total and straight.stop_reason == "max_steps"

    model_b = make_model(0)
    first = fit(model_b, make_task(), make_opt(model_b), data, val,
                config=cfg(epochs=5, max_steps=split, out_dir=str(tmp_path / "b")))
    assert first.step == split

    model_c = make_model(12345)  # different initial weights and dropout seed: all must come from the file
    opt_c = make_opt(model_c)
    second = fit(model_c, make_task(), opt_c, data, val, resume=str(tmp_path / "b" / "last.npz"),
                 config=cfg(epochs=5, max_steps=total, out_dir=str(tmp_path / "b")))

    assert first.step_losses + second.step_losses == straight.step_losses
    assert_same_weights(weights(model_c), weights(model_a))
    assert opt_c.t == opt_a.t == total and opt_c.lr == opt_a.lr
    assert model_c.rng.state_dict() == model_a.rng.state_dict()
    assert second.step == total and second.epoch == straight.epoch
    # the epoch records agree too (apart from wall time and throughput)
    drop = ("time_s", "tokens_per_s", "train_loss")
    strip = [{k: v for k, v in h.items() if k not in drop} for h in straight.history]
    assert [{k: v for k, v in h.items() if k not in drop} for h in second.history] == strip


def test_resume_continues_to_the_configured_epochs(tmp_path):
    data = lm_data(16)
    m1 = lm_model(dropout=0.1)
    full = fit(m1, LMTask(), Adam(m1, lr=3e-3), data, config=cfg(epochs=4, out_dir=str(tmp_path / "full")))
    m2 = lm_model(dropout=0.1)
    fit(m2, LMTask(), Adam(m2, lr=3e-3), data, config=cfg(epochs=2, out_dir=str(tmp_path / "part")))
    m3 = lm_model(seed=7, dropout=0.1)
    rest = fit(m3, LMTask(), Adam(m3, lr=3e-3), data, resume=tmp_path / "part" / "last.npz",
               config=cfg(epochs=4, out_dir=str(tmp_path / "part")))
    assert len(rest.history) == 4 and rest.epoch == 4
    assert rest.step_losses == full.step_losses[4:]
    assert_same_weights(weights(m3), weights(m1))


def test_resume_needs_trainer_state(tmp_path):
    model = lm_model()
    path = save_checkpoint(tmp_path / "plain.npz", model, Adam(model))
    with pytest.raises(ValueError, match="no trainer state"):
        fit(model, LMTask(), Adam(model), lm_data(), config=cfg(), resume=path)


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


# ---------------------------------------------------------------------------
# early stopping, best checkpoint, history
# ---------------------------------------------------------------------------
def test_early_stopping_keeps_best(tmp_path):
    scores = [0.1, 0.5, 0.9, 0.4, 0.6, 0.8, 0.95, 0.99]  # best at epoch 3, then 3 worse epochs
    snapshots = {}

    def score(trainer, epoch, metrics):
        snapshots[epoch + 1] = weights(trainer.model)
        assert not trainer.model.training  # callbacks run in eval mode
        return {"score": scores[epoch], "seen_lr": metrics["lr"]}

    model = lm_model()
    out = tmp_path / "run"
    tr = fit(model, LMTask(), Adam(model, lr=1e-3), lm_data(16), lm_data(4, seed=9),
             config=cfg(epochs=20, patience=3, metric="score", mode="max", out_dir=str(out)),
             callbacks=[score])
    assert tr.stop_reason == "early_stopping"
    assert len(tr.history) == 6
    assert tr.best == 0.9 and tr.best_epoch == 3

    best = load_checkpoint(out / "best.npz")
    assert best.meta["trainer"]["best"] == 0.9 and best.meta["trainer"]["best_epoch"] == 3
    assert_same_weights(best.weights, snapshots[3])
    rebuilt, _ = model_from_checkpoint(out / "best.npz")
    assert_same_weights(weights(rebuilt), snapshots[3])
    last = load_checkpoint(out / "last.npz")
    assert_same_weights(last.weights, snapshots[6])
    assert last.meta["trainer"]["stop_reason"] == "early_stopping"

    history = json.loads((out / "history.json").read_text())
    assert [h["score"] for h in history] == scores[:6]
    assert all("seen_lr" in h and "val_loss" in h and "train_loss" in h for h in history)
    assert [h["epoch"] for h in history] == [1, 2, 3, 4, 5, 6]
    assert sorted(p.name for p in out.iterdir()) == ["best.npz", "history.csv", "history.json", "last.npz"]


def test_early_stopping_on_val_loss_min_mode(tmp_path):
    """The default metric is val_loss (lower is better): best/best_epoch/best.npz follow
    the lowest validation loss."""
    model = lm_model()
    data = lm_data(16)
    losses = []

    def rec(trainer, epoch, metrics):
        losses.append(metrics["val_loss"])

    tr = fit(model, LMTask(), SGD(model, lr=1e-3), data, data, callbacks=[rec],
             config=cfg(epochs=4, patience=1, out_dir=str(tmp_path)))
    best_epoch = int(np.argmin(losses)) + 1
    assert tr.best == min(losses) and tr.best_epoch == best_epoch
    assert load_checkpoint(tmp_path / "best.npz").meta["trainer"]["best"] == min(losses)


def test_metric_falls_back_to_train_loss_without_validation(tmp_path):
    model = lm_model()
    tr = fit(model, LMTask(), Adam(model, lr=3e-3), lm_data(16), config=cfg(epochs=3, out_dir=str(tmp_path)))
    assert tr.best == min(h["train_loss"] for h in tr.history)
    assert "val_loss" not in tr.history[0]
    history = json.loads((tmp_path / "history.json").read_text())
    assert len(history) == 3 and history == json.loads(json.dumps(tr.history))


def test_vocab_and_extra_meta_in_every_checkpoint(tmp_path):
    model = lm_model()
    fit(model, LMTask(), Adam(model), lm_data(16), config=cfg(epochs=1, out_dir=str(tmp_path)),
        vocab={"tokens": ["<pad>", "<bos>"]}, extra_meta={"dataset": "toy"})
    for name in ("best.npz", "last.npz"):
        ck = load_checkpoint(tmp_path / name)
        assert ck.vocab == {"tokens": ["<pad>", "<bos>"]} and ck.meta["dataset"] == "toy"
        assert ck.meta["train_config"]["batch_size"] == 8


# ---------------------------------------------------------------------------
# divergence
# ---------------------------------------------------------------------------
def test_nan_weight_raises_before_any_update(tmp_path):
    model = lm_model()
    opt = Adam(model)
    model.embed.tok.weight.data[5, 0] = np.nan
    before = weights(model)
    with pytest.raises(TrainingDiverged) as info:
        fit(model, LMTask(), opt, lm_data(), config=cfg(out_dir=str(tmp_path)))
    msg = str(info.value)
    assert "non-finite loss" in msg and "epoch 1, step 1" in msg and "none saved yet" in msg
    assert opt.t == 0
    after = weights(model)
    for k in before:
        np.testing.assert_array_equal(after[k], before[k])  # (NaN compares equal here)


def test_infinite_loss_names_epoch_step_and_last_checkpoint(tmp_path):
    """3 steps per epoch; the 5th loss (epoch 2, step 5) is inf."""
    task = WrappedTask(LMTask(), hook=lambda n, m: backend.asarray(np.float32(np.inf)) if n == 5 else None)
    model = lm_model(dropout=0.1)
    opt = Adam(model, lr=1e-3)
    seen = []
    with pytest.raises(TrainingDiverged) as info:
        fit(model, task, opt, lm_data(24), config=cfg(epochs=5, out_dir=str(tmp_path)),
            callbacks=[lambda tr, e, m: seen.append(tr.step)])
    msg = str(info.value)
    assert "epoch 2, step 5" in msg and "inf" in msg and "no update was made" in msg
    assert str(tmp_path / "last.npz") in msg
    # no update: the weights are those after step 4, which a 4-step run reproduces
    assert opt.t == 4
    ref = lm_model(dropout=0.1)
    fit(ref, LMTask(), Adam(ref, lr=1e-3), lm_data(24), config=cfg(epochs=5, max_steps=4))
    assert_same_weights(weights(model), weights(ref))
    # the last good checkpoint is the end of epoch 1 and loads
    assert load_checkpoint(tmp_path / "last.npz").meta["trainer"]["step"] == 3 == seen[0]


class _InfGradTask(WrappedTask):
    """Finite loss, but the gradient of one parameter becomes infinite on step 2."""

    def backward(self, model):
        self.task.backward(model)
        if self.calls == 2:
            model.head.linear.bias.grad[0] = np.inf


@pytest.mark.parametrize("clip", [1.0, None])
def test_non_finite_gradient_raises_before_update(clip):
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    task = _InfGradTask(LMTask())
    snapshots = []
    orig_step = opt.step

    def step():
        orig_step()
        snapshots.append(weights(model))

    opt.step = step
    with pytest.raises(TrainingDiverged, match="non-finite gradient norm .* step 2"):
        fit(model, task, opt, lm_data(), config=cfg(clip=clip))
    assert opt.t == 1
    assert_same_weights(weights(model), snapshots[0])
    assert all(np.isfinite(v).all() for v in weights(model).values())


# ---------------------------------------------------------------------------
# interruption and stopping rules
# ---------------------------------------------------------------------------
def test_keyboard_interrupt_ends_cleanly_and_keeps_best(tmp_path, capsys):
    """2 steps per epoch; Ctrl-C arrives inside the 3rd loss (epoch 2)."""
    def hook(n, model):
        if n == 3:
            raise KeyboardInterrupt

    snaps = {}
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    tr = fit(model, WrappedTask(LMTask(), hook), opt, lm_data(16), config=cfg(epochs=5, out_dir=str(tmp_path)),
             callbacks=[lambda t, e, m: snaps.update({e + 1: weights(t.model)})])
    assert tr.stop_reason == "interrupted"
    assert tr.step == 2 and opt.t == 2 and len(tr.history) == 1
    out = capsys.readouterr().out
    assert "interrupted at epoch 2" in out and str(tmp_path / "best.npz") in out
    best, ck = model_from_checkpoint(tmp_path / "best.npz")
    assert_same_weights(weights(best), snaps[1])
    assert ck.meta["trainer"]["best_epoch"] == 1
    load_checkpoint(tmp_path / "last.npz")  # intact, too
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files


def test_keyboard_interrupt_before_any_checkpoint():
    def hook(n, model):
        raise KeyboardInterrupt

    model = lm_model()
    tr = fit(model, WrappedTask(LMTask(), hook), Adam(model), lm_data(), config=cfg())
    assert tr.stop_reason == "interrupted" and tr.step == 0


def test_max_steps_stops_mid_epoch(tmp_path):
    model = lm_model()
    opt = Adam(model)
    tr = fit(model, LMTask(), opt, lm_data(24), config=cfg(epochs=10, max_steps=5, out_dir=str(tmp_path)))
    assert tr.stop_reason == "max_steps"
    assert tr.step == 5 and opt.t == 5 and len(tr.step_losses) == 5
    assert len(tr.history) == 1  # epoch 1 finished (3 steps), epoch 2 stopped after 2
    st = load_checkpoint(tmp_path / "last.npz").meta["trainer"]
    assert (st["epoch"], st["batch"], st["step"]) == (1, 2, 5)


def test_max_time_ends_the_running_epoch_early_and_evaluates_it(tmp_path):
    model = lm_model()
    tr = fit(model, LMTask(), Adam(model), lm_data(24), lm_data(4, seed=3),
             config=cfg(epochs=50, max_time=0.0, out_dir=str(tmp_path)))
    assert tr.stop_reason == "max_time"
    assert len(tr.history) == 1 and tr.step == 1  # one step, then out of time: the epoch ends there
    assert tr.history[0]["epoch_fraction"] == pytest.approx(1 / 3, abs=1e-4) and "val_loss" in tr.history[0]
    assert load_checkpoint(tmp_path / "best.npz").meta["trainer"]["step"] == 1  # evaluated and saved


def test_a_generous_max_time_leaves_epochs_whole():
    model = lm_model()
    tr = fit(model, LMTask(), Adam(model), lm_data(24), config=cfg(epochs=2, max_time=3600.0))
    assert tr.stop_reason == "epochs" and all("epoch_fraction" not in h for h in tr.history)


def test_epochs_zero_trains_nothing():
    model = lm_model()
    before = weights(model)
    tr = fit(model, LMTask(), Adam(model), lm_data(), config=cfg(epochs=0))
    assert tr.step == 0 and tr.history == []
    assert_same_weights(weights(model), before)


def test_quiet_prints_nothing(capsys):
    model = lm_model()
    fit(model, LMTask(), Adam(model), lm_data(), lm_data(4, seed=3), config=cfg(epochs=2, quiet=True))
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""


def test_not_quiet_reports_progress(capsys, monkeypatch):
    model = lm_model()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)  # a terminal: a progress bar too
    fit(model, LMTask(), Adam(model), lm_data(), lm_data(4, seed=3), config=cfg(epochs=2, quiet=False))
    captured = capsys.readouterr()
    assert "epoch 1:" in captured.out and "val_loss=" in captured.out
    assert "epoch 2" in captured.out
    assert "epoch 1" in captured.err and "loss=" in captured.err  # the tqdm progress bar


def test_output_to_a_file_is_one_line_per_epoch_without_bar_frames(capsys, monkeypatch):
    model = lm_model()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)  # redirected to a log file
    fit(model, LMTask(), Adam(model), lm_data(), lm_data(4, seed=3), config=cfg(epochs=2, quiet=False))
    captured = capsys.readouterr()
    assert captured.err == "" and "\r" not in captured.out
    assert [line.split(":")[0] for line in captured.out.splitlines()] == ["epoch 1", "epoch 2"]


def test_a_long_epoch_prints_a_progress_line_now_and_then_to_a_log(capsys, monkeypatch):
    from minitransformer.train.trainer import Trainer
    model = lm_model()
    monkeypatch.setattr(sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setattr(Trainer, "LINE_EVERY_S", 0.0)  # every read-back, for the test
    fit(model, LMTask(), Adam(model), lm_data(24), config=cfg(epochs=1, quiet=False))
    lines = capsys.readouterr().out.splitlines()
    progress = [line for line in lines if line.startswith("  epoch 1:")]
    assert [p.split(",")[0] for p in progress] == ["  epoch 1: 1 of 3 batches", "  epoch 1: 2 of 3 batches",
                                                   "  epoch 1: 3 of 3 batches"]
    assert all("tokens/s" in p and "mean loss" in p for p in progress) and lines[-1].startswith("epoch 1:")


def test_history_csv_has_a_row_per_epoch_with_the_phase_first(tmp_path):
    import csv
    model = lm_model()
    earlier = [{"phase": "pretrain", "epoch": 1, "step": 3, "lr": 0.001, "train_loss": 3.0, "time_s": 0.1}]
    tr = fit(model, LMTask(), Adam(model), lm_data(), lm_data(4, seed=3), earlier_history=earlier,
             config=cfg(epochs=2, out_dir=str(tmp_path)), extra_meta={"phase": "train"})
    rows = list(csv.DictReader((tmp_path / "history.csv").open()))
    assert [(r["phase"], r["epoch"]) for r in rows] == [("pretrain", "1"), ("train", "1"), ("train", "2")]
    assert list(rows[0])[:6] == ["phase", "epoch", "step", "lr", "train_loss", "val_loss"]
    assert float(rows[2]["val_loss"]) == pytest.approx(tr.history[1]["val_loss"], rel=1e-5)
    assert rows[0]["val_loss"] == ""  # the pretraining row had none


def test_empty_training_data_is_an_error():
    model = lm_model()
    with pytest.raises(ValueError, match="empty"):
        fit(model, LMTask(), Adam(model), [], config=cfg())
    with pytest.raises(ValueError, match="empty"):
        fit(model, LMTask(), Adam(model), lambda epoch: [], config=cfg())


def test_bad_config_values():
    with pytest.raises(ValueError, match="mode"):
        TrainConfig(mode="best")
    with pytest.raises(ValueError):
        TrainConfig(batch_size=0)
    with pytest.raises(ValueError):
        TrainConfig(epochs=-1)


def test_strict_backend_training_and_resume(tmp_path):
    """The whole loop runs on the strict CuPy stand-in (no hidden host conversions),
    and its resume is exact too."""
    backend.use("strict")
    data = lm_data(16)
    m1 = lm_model(dropout=0.1)
    full = fit(m1, LMTask(), Adam(m1, lr=3e-3), data, data[:4], config=cfg(epochs=2, out_dir=str(tmp_path / "a")))
    m2 = lm_model(dropout=0.1)
    fit(m2, LMTask(), Adam(m2, lr=3e-3), data, data[:4], config=cfg(epochs=2, max_steps=3, out_dir=str(tmp_path / "b")))
    m3 = lm_model(seed=4, dropout=0.1)
    rest = fit(m3, LMTask(), Adam(m3, lr=3e-3), data, data[:4], resume=tmp_path / "b" / "last.npz",
               config=cfg(epochs=2, out_dir=str(tmp_path / "b")))
    assert rest.step_losses == full.step_losses[3:]
    assert_same_weights(weights(m3), weights(m1))
    assert all(math.isfinite(x) for x in full.step_losses)


def test_deferred_checks_train_like_per_step_checks_and_still_stop_on_nan(any_backend, tmp_path):
    """sync_every > 1 (the GPU default) reads losses back in groups: the same losses as
    checking every step, and a NaN between two reads drops that step's gradients, keeps
    the weights finite, and stops training at the next read."""
    import numpy as np
    from minitransformer import backend
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.optim import Adam
    from minitransformer.tasks import LMTask
    from minitransformer.train import TrainConfig, TrainingDiverged, fit

    rng = np.random.default_rng(0)
    data = [[1] + list(rng.integers(3, 9, size=rng.integers(3, 7))) + [2] for _ in range(48)]

    def run(sync_every, task=None):
        model = DecoderLM(DecoderLMConfig(vocab_size=9, max_len=10, d_model=8, n_heads=2, n_layers=1, d_ff=16))
        cfg = TrainConfig(epochs=1, batch_size=8, quiet=True, sync_every=sync_every, clip=None)
        return model, fit(model, task or LMTask(0), Adam(model, lr=1e-2), data, config=cfg)

    _, every = run(1)
    _, grouped = run(4)
    assert np.allclose(every.step_losses, grouped.step_losses, rtol=1e-6), "grouped reads changed the losses"

    class PoisonAtStep3(LMTask):
        calls = 0

        def loss(self, model, batch, rng=None):
            loss, n = super().loss(model, batch, rng)
            PoisonAtStep3.calls += 1
            return (loss * float("nan") if PoisonAtStep3.calls == 3 else loss), n

    model = None
    with pytest.raises(TrainingDiverged, match=r"step 3; its gradients were dropped \(read back later, at step 4\)"):
        model, _ = run(4, PoisonAtStep3(0))
    model = DecoderLM(DecoderLMConfig(vocab_size=9, max_len=10, d_model=8, n_heads=2, n_layers=1, d_ff=16))
    PoisonAtStep3.calls = 0
    trainer_cfg = TrainConfig(epochs=1, batch_size=8, quiet=True, sync_every=4, clip=None)
    with pytest.raises(TrainingDiverged):
        fit(model, PoisonAtStep3(0), Adam(model, lr=1e-2), data, config=trainer_cfg)
    for name, p in model.named_parameters():
        assert bool(backend.xp.isfinite(p.data).all()), f"{name} became non-finite"


# ---------------------------------------------------------------------------
# non-finite weights: caught after the update, never saved, the real last good file named
# ---------------------------------------------------------------------------
def _all_finite(model):
    return all(bool(backend.xp.isfinite(p.data).all()) for p in model.parameters())


def _poison_after_step(opt, at, what="weight"):
    """Make the optimizer's update of step ``at`` leave a NaN weight (or an infinite
    second moment), as an infinite learning rate or an overflow would."""
    orig = opt.step

    def step():
        orig()
        if opt.t == at:
            if what == "weight":
                xp_data = opt.params["blocks.0.ff.fc1.weight"].data
                xp_data[0, 0] = np.nan
            else:
                opt.state["blocks.0.ln1.bias"]["v"][0] = np.inf
    opt.step = step


def _saved_files(folder):
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


@pytest.mark.parametrize("sync_every", [1, 4])
def test_nan_weights_made_by_the_update_are_never_saved(any_backend, tmp_path, sync_every):
    """3 steps per epoch; the update of step 3 (the last of epoch 1) makes a weight NaN.
    Before, best.npz and last.npz were written with it. Now training stops at once
    (sync_every=1) or at the epoch's read-back (4), nothing is written, and the message
    names the step, the tensor and 'none saved yet'."""
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    _poison_after_step(opt, 3)
    with pytest.raises(TrainingDiverged) as info:
        fit(model, LMTask(), opt, lm_data(24), lm_data(6, seed=5),
            config=cfg(epochs=3, out_dir=str(tmp_path), sync_every=sync_every))
    msg = str(info.value)
    assert "step 3" in msg and "weight blocks.0.ff.fc1.weight" in msg and "none saved yet" in msg, msg
    assert _saved_files(tmp_path) == []


def test_nan_weights_in_epoch_two_keep_and_name_the_epoch_one_checkpoint(tmp_path):
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    _poison_after_step(opt, 6)
    with pytest.raises(TrainingDiverged) as info:
        fit(model, LMTask(), opt, lm_data(24), lm_data(6, seed=5), config=cfg(epochs=3, out_dir=str(tmp_path)))
    msg = str(info.value)
    assert "step 6" in msg and f"{tmp_path / 'last.npz'} (step 3)" in msg, msg
    for name in ("best.npz", "last.npz"):
        ck = load_checkpoint(tmp_path / name)  # refuses non-finite weights: these are finite
        assert ck.meta["trainer"]["step"] == 3


def test_an_infinite_learning_rate_set_after_construction_is_caught_after_the_update(tmp_path):
    """The optimizer refuses lr=inf when built; set behind its back, the update makes
    the weights NaN from finite gradients, and the check after the step stops training."""
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    opt.lr = float("inf")
    with pytest.raises(TrainingDiverged, match=r"non-finite weight .* step 1"):
        fit(model, LMTask(), opt, lm_data(24), config=cfg(out_dir=str(tmp_path)))
    assert _saved_files(tmp_path) == []


def test_non_finite_optimizer_state_is_never_saved(tmp_path):
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    _poison_after_step(opt, 3, what="moment")
    with pytest.raises(TrainingDiverged) as info:
        fit(model, LMTask(), opt, lm_data(24), config=cfg(epochs=3, out_dir=str(tmp_path)))
    msg = str(info.value)
    assert "optimizer state blocks.0.ln1.bias/v" in msg and "step 3" in msg and "none saved yet" in msg, msg
    assert _saved_files(tmp_path) == []


def test_last_good_checkpoint_is_this_runs_not_a_stale_file(tmp_path):
    """Files left in out_dir by an earlier run are not this run's last good checkpoint."""
    old = lm_model(seed=3)
    save_checkpoint(tmp_path / "last.npz", old)
    save_checkpoint(tmp_path / "best.npz", old)
    model = lm_model()
    model.embed.tok.weight.data[5, 0] = np.nan
    with pytest.raises(TrainingDiverged) as info:
        fit(model, LMTask(), Adam(model), lm_data(), config=cfg(out_dir=str(tmp_path)))
    assert "Last good checkpoint: none saved yet" in str(info.value)


def test_last_good_checkpoint_after_resume_is_the_resumed_file(tmp_path):
    model = lm_model()
    fit(model, LMTask(), Adam(model, lr=1e-3), lm_data(24), config=cfg(epochs=1, out_dir=str(tmp_path / "a")))
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    _poison_after_step(opt, 4)
    with pytest.raises(TrainingDiverged) as info:
        fit(model, LMTask(), opt, lm_data(24), resume=tmp_path / "a" / "last.npz",
            config=cfg(epochs=3, out_dir=str(tmp_path / "b")))
    assert f"{tmp_path / 'a' / 'last.npz'} (step 3" in str(info.value)


def test_deferred_training_steps_never_read_the_device(monkeypatch):
    """With sync_every > 1 a whole step, the check of the weights after the update
    included, runs under forbid_host_sync on the strict backend."""
    from minitransformer.train import Trainer
    backend.use("strict")
    orig = Trainer._step
    seen = []

    def guarded(self, batch, rng, check_now):
        assert not check_now
        with backend.forbid_host_sync():
            out = orig(self, batch, rng, check_now)
        seen.append(self.step)
        return out

    monkeypatch.setattr(Trainer, "_step", guarded)
    model = lm_model()
    fit(model, LMTask(), Adam(model, lr=1e-3), lm_data(24), config=cfg(epochs=2, sync_every=4))
    assert len(seen) == 6 and _all_finite(model)


# ---------------------------------------------------------------------------
# the early-stopping metric: known names only, never NaN, never from zero scored tokens
# ---------------------------------------------------------------------------
class CountingLM(LMTask):
    """An LMTask that counts its training losses (to prove nothing trained)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.losses = 0

    def loss(self, model, batch, rng=None):
        self.losses += 1
        return super().loss(model, batch, rng)


def test_misspelled_metric_is_refused_before_training(tmp_path):
    """Before, 'val_los' silently became train_loss."""
    model = lm_model()
    task = CountingLM()
    with pytest.raises(ValueError, match=r"metric='val_los' .*'val_acc', 'val_loss'") as info:
        fit(model, task, Adam(model), lm_data(16), lm_data(4, seed=9), config=cfg(metric="val_los",
                                                                                  out_dir=str(tmp_path)))
    assert "\n" not in str(info.value)
    assert task.losses == 0 and _saved_files(tmp_path) == []


def test_a_validation_metric_without_validation_data_is_refused():
    model = lm_model()
    with pytest.raises(ValueError, match=r"metric='val_loss' .*no validation data"):
        fit(model, CountingLM(), Adam(model), lm_data(16), config=cfg(metric="val_loss"))


def test_misspelled_metric_with_callbacks_stops_before_any_checkpoint(tmp_path):
    """Callbacks may add metrics, so the name is checked at the end of the first epoch,
    against the names that epoch produced, before anything is saved."""
    model = lm_model()
    with pytest.raises(ValueError, match=r"metric='scor' .*'score'"):
        fit(model, LMTask(), Adam(model), lm_data(16), lm_data(4, seed=9),
            config=cfg(metric="scor", mode="max", out_dir=str(tmp_path)),
            callbacks=[lambda tr, e, m: {"score": 1.0}])
    assert _saved_files(tmp_path) == []


def test_default_metric_is_val_loss_with_validation_and_train_loss_without():
    model = lm_model()
    with_val = fit(model, LMTask(), Adam(model), lm_data(16), lm_data(4, seed=9), config=cfg(epochs=1))
    assert with_val.best == with_val.history[0]["val_loss"]
    without = fit(model, LMTask(), Adam(model), lm_data(16), config=cfg(epochs=1))
    assert without.best == without.history[0]["train_loss"]


class NaNMetricAt(LMTask):
    """val_loss is NaN at the given (1-based) epochs."""

    def __init__(self, epochs):
        super().__init__()
        self.nan_epochs, self.evals = set(epochs), 0

    def evaluate(self, model, batches):
        self.evals += 1
        out = super().evaluate(model, batches)
        return {**out, "val_loss": math.nan} if self.evals in self.nan_epochs else out


@pytest.mark.parametrize("nan_epoch", [1, 2])
def test_nan_validation_metric_stops_training_and_is_never_best(tmp_path, nan_epoch):
    """Before, a NaN in epoch 1 became 'best' and no later epoch could beat it."""
    model = lm_model()
    with pytest.raises(TrainingDiverged, match=f"val_loss is nan at epoch {nan_epoch}") as info:
        fit(model, NaNMetricAt([nan_epoch]), Adam(model, lr=1e-3), lm_data(16), lm_data(4, seed=9),
            config=cfg(epochs=4, out_dir=str(tmp_path)))
    if nan_epoch == 1:
        assert _saved_files(tmp_path) == [] and "none saved yet" in str(info.value)
    else:
        best = load_checkpoint(tmp_path / "best.npz").meta["trainer"]
        assert best["best_epoch"] == 1 and math.isfinite(best["best"])
        assert str(tmp_path / "last.npz") in str(info.value)


def test_a_nan_in_another_metric_is_written_as_null(tmp_path):
    """history.json is strict JSON: a NaN metric that does not pick the best checkpoint
    is recorded as null (before, writing history.json crashed)."""
    model = lm_model()
    tr = fit(model, LMTask(), Adam(model), lm_data(16), lm_data(4, seed=9),
             config=cfg(epochs=2, out_dir=str(tmp_path)), callbacks=[lambda t, e, m: {"val_auc": math.nan}])
    history = json.loads((tmp_path / "history.json").read_text())
    assert [h["val_auc"] for h in history] == [None, None]
    assert math.isnan(tr.history[0]["val_auc"])


@pytest.mark.parametrize("case", ["lm_only_padding", "mlm_only_special_tokens", "property_no_labels"])
def test_validation_data_without_scored_tokens_is_refused_before_training(case):
    """Before, such a validation set reported val_loss 0.0 (a perfect score)."""
    from minitransformer.tasks import PropertyTask
    if case == "lm_only_padding":
        model, task, train, val = lm_model(), CountingLM(), lm_data(16), [[BOS, PAD, PAD]]
    elif case == "mlm_only_special_tokens":
        model, task, train, val = mlm_model(), mlm_task(), lm_data(16), [[BOS, EOS], [BOS, EOS]]
    else:
        model = Encoder(EncoderConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                                      mlm_head=False, n_outputs=2))
        task = PropertyTask()
        train = [([BOS, 5, 6], [1.0, 0.0])] * 4
        val = [([BOS, 5], [math.nan, math.nan])]
    before = weights(model)
    with pytest.raises(ValueError, match="validation data .* no scored"):
        fit(model, task, Adam(model), train, val, config=cfg())
    assert_same_weights(weights(model), before)


def test_empty_validation_list_is_refused():
    model = lm_model()
    with pytest.raises(ValueError, match="val_data is empty"):
        fit(model, LMTask(), Adam(model), lm_data(16), [], config=cfg())


# ---------------------------------------------------------------------------
# resume checks the vocabulary and the data settings (the fingerprint)
# ---------------------------------------------------------------------------
TOKENS = ["<pad>", "<bos>", "<eos>", "<mask>"] + list("abcdefghi")  # V = 13 tokens


def _first_run(tmp_path, **kw):
    model = lm_model()
    fit(model, LMTask(), Adam(model, lr=1e-3), lm_data(24), config=cfg(epochs=5, max_steps=2,
                                                                         out_dir=str(tmp_path)), **kw)
    return tmp_path / "last.npz"


def _resume(path, tmp_path, **kw):
    model = lm_model()
    return fit(model, LMTask(), Adam(model, lr=1e-3), lm_data(24), resume=path,
               config=cfg(epochs=5, max_steps=4, out_dir=str(tmp_path)), **kw)


def test_resume_with_another_vocabulary_of_the_same_size_is_refused(tmp_path):
    """Before, a vocabulary with the same number of tokens in another order resumed
    silently, and every token id meant another token."""
    path = _first_run(tmp_path, vocab={"tokens": TOKENS})
    swapped = TOKENS[:4] + TOKENS[4:][::-1]
    with pytest.raises(ValueError, match=r"cannot resume .*vocab.*same data and vocabulary.*fresh") as info:
        _resume(path, tmp_path, vocab={"tokens": swapped})
    assert "\n" not in str(info.value)
    assert _resume(path, tmp_path, vocab={"tokens": TOKENS}).step == 4  # the same one resumes


def test_resume_with_other_data_settings_is_refused_naming_the_setting(tmp_path):
    settings = {"data": {"file": "train.csv", "split_seed": 0}, "max_tokens": 64}
    path = _first_run(tmp_path, vocab={"tokens": TOKENS}, fingerprint=settings)
    meta = load_checkpoint(path).meta["fingerprint"]
    assert sorted(meta) == ["data", "max_tokens", "vocab"] and all(v.startswith("sha256:") for v in meta.values())
    other = {"data": {"file": "train.csv", "split_seed": 1}, "max_tokens": 64}
    with pytest.raises(ValueError, match="cannot resume .*data") as info:
        _resume(path, tmp_path, vocab={"tokens": TOKENS}, fingerprint=other)
    assert "max_tokens" not in str(info.value) and "vocab" not in str(info.value).split("(")[1]
    with pytest.raises(ValueError, match="cannot resume .*this run gives no max_tokens"):
        _resume(path, tmp_path, vocab={"tokens": TOKENS}, fingerprint={"data": settings["data"]})
    assert _resume(path, tmp_path, vocab={"tokens": TOKENS}, fingerprint=dict(settings)).step == 4


def test_checkpoints_without_a_fingerprint_still_resume(tmp_path):
    """Checkpoints written before fingerprints existed have none; they resume as before."""
    path = _first_run(tmp_path, vocab={"tokens": TOKENS})
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes())
    del meta["fingerprint"]
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    old = tmp_path / "old.npz"
    with open(old, "wb") as f:
        np.savez(f, **arrays)
    assert _resume(old, tmp_path / "b", vocab={"tokens": TOKENS[::-1]}, fingerprint={"data": 1}).step == 4


def test_fingerprint_values_must_be_json_data():
    model = lm_model()
    with pytest.raises(ValueError, match="fingerprint entry 'data' .*JSON"):
        fit(model, LMTask(), Adam(model), lm_data(8), config=cfg(), fingerprint={"data": object()})


# ---------------------------------------------------------------------------
# degenerate data is refused before training, naming the example
# ---------------------------------------------------------------------------
def test_a_bos_only_training_example_is_refused_before_training(tmp_path):
    """Before, the batch holding it crashed deep in the model (or, mixed with longer
    examples, trained silently on nothing)."""
    data = lm_data(16)
    data[7] = [BOS]
    model = lm_model()
    task = CountingLM()
    with pytest.raises(ValueError, match="training data: example 7 has 1 token"):
        fit(model, task, Adam(model), data, config=cfg(out_dir=str(tmp_path)))
    assert task.losses == 0 and _saved_files(tmp_path) == []


def test_a_bad_example_in_epoch_data_is_refused_at_the_start_of_its_epoch():
    def data(epoch):
        d = lm_data(16, seed=epoch)
        if epoch == 1:
            d[3] = []
        return d

    model = lm_model()
    task = CountingLM()
    with pytest.raises(ValueError, match="training data of epoch 2: example 3 has 0 tokens"):
        fit(model, task, Adam(model), data, config=cfg(epochs=3))
    assert task.losses == 2  # epoch 1 (two batches) only


def test_a_bos_only_validation_example_is_refused_before_training():
    model = lm_model()
    task = CountingLM()
    with pytest.raises(ValueError, match="validation data: example 1 has 1 token"):
        fit(model, task, Adam(model), lm_data(16), [[BOS, 5, EOS], [BOS]], config=cfg())
    assert task.losses == 0


@pytest.mark.parametrize("bad, match", [
    (dict(clip=-1.0), "clip"), (dict(clip=float("nan")), "clip"), (dict(patience=0), "patience"),
    (dict(max_steps=-1), "max_steps"), (dict(max_time=float("nan")), "max_time"),
    (dict(eval_batch_size=0), "eval_batch_size"), (dict(sync_every=0), "sync_every"),
    (dict(batch_size=2.5), "batch_size"), (dict(metric=""), "metric"),
])
def test_other_bad_config_values_are_refused_at_construction(bad, match):
    """Before, a negative clip failed only at the first step, and sync_every=0 or a
    NaN max_time were silently taken as 'default' or 'never'."""
    with pytest.raises(ValueError, match=f"TrainConfig.{match}"):
        TrainConfig(**bad)


def test_a_schedule_gone_bad_names_the_last_good_checkpoint(tmp_path):
    """A schedule that gives NaN mid-run: one line saying the step and the last good checkpoint."""
    model = lm_model()
    opt = Adam(model, lr=lambda t: 1e-3 if t <= 3 else float("nan"))
    with pytest.raises(ValueError) as info:
        fit(model, LMTask(), opt, lm_data(24), config=cfg(epochs=5, out_dir=str(tmp_path)))
    msg = str(info.value)
    assert "schedule" in msg and "Last good checkpoint: " in msg and "\n" not in msg
    assert "step 4" in msg and str(tmp_path) in msg  # the end of epoch 1 (3 steps) was saved


def test_rng_streams_are_independent_and_stream_0_is_the_plain_one():
    """Data-parallel ranks draw dropout masks from RNG stream = rank: stream 0 is the
    usual (seed, counter) stream, other streams differ from it and from each other,
    and each is reproducible from (seed, counter, stream)."""
    draws = {s: backend.RNG(5, stream=s).random((64,), dtype=np.float64) for s in (0, 1, 2)}
    np.testing.assert_array_equal(draws[0], backend.RNG(5).random((64,), dtype=np.float64))
    assert not np.array_equal(draws[0], draws[1]) and not np.array_equal(draws[1], draws[2])
    np.testing.assert_array_equal(draws[1], backend.RNG(5, stream=1).random((64,), dtype=np.float64))
    assert backend.RNG(5, stream=1).state_dict() == {"seed": 5, "counter": 0}
