"""The training loop of minitransformer.train: the same seed gives the same run, the loss
falls, early stopping keeps the best checkpoint, the history is written, and Ctrl-C,
max_steps, max_time and quiet behave as documented."""
from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.checkpoint import load_checkpoint, model_from_checkpoint
from minitransformer.models import DecoderLM, DecoderLMConfig
from minitransformer.optim import SGD, Adam
from minitransformer.train.tasks import LMTask
from minitransformer.train import TrainConfig, TrainingDiverged, fit
from train_helpers import assert_same_weights, cfg, lm_data, lm_model, weights, WrappedTask


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
    from minitransformer.train.tasks import LMTask
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


def test_a_finished_run_leaves_the_weights_to_the_next_phases_optimizer(monkeypatch):
    """Two phases over one model, the first phase's trainer still held (as a caller keeps its
    history): in the fast set the second phase's optimizer lays the weights out flat (the first
    lets go when its run ends), and both phases give the numbers they give without the layout."""
    from minitransformer import kernels
    from minitransformer.fast.optimizer import layout_of

    def two_phases(flat_on: bool):
        monkeypatch.setenv("MINITRANSFORMER_FLAT", "1" if flat_on else "0")
        with kernels.scope("fast"):
            model, data = lm_model(0), lm_data(24)
            first = fit(model, LMTask(), Adam(model, lr=3e-3), data, config=cfg(epochs=1))
            second_opt, laid_out = Adam(model, lr=1e-3), []
            note = lambda trainer, epoch, metrics: laid_out.append(layout_of(second_opt) is not None)  # noqa: E731
            second = fit(model, LMTask(), second_opt, data, config=cfg(epochs=2), callbacks=[note])
            return first.step_losses + second.step_losses, weights(model), laid_out

    losses, after, laid_out = two_phases(True)
    assert laid_out == [True, True], "the second phase's optimizer took no flat layout"
    losses_off, after_off, _ = two_phases(False)
    assert losses == losses_off
    assert_same_weights(after, after_off)
