"""The running average of the weights (minitransformer.train.weight_average) and the trainer
that keeps one (TrainConfig.average): its update rule, the swap in and out, the metric and
best.npz taken from the average, the trained weights' own metrics beside, last.npz keeping
both, and a resume that goes on exactly."""
from __future__ import annotations

import math

import numpy as np
import pytest

from minitransformer.checkpoint import NonFiniteCheckpoint, load_checkpoint, save_checkpoint
from minitransformer.optim import AdamW, WarmupCosineLR
from minitransformer.train import TrainConfig, fit
from minitransformer.train.tasks import LMTask
from minitransformer.train.weight_average import WeightAverage
from train_helpers import assert_same_weights, cfg, lm_data, lm_model, weights


def test_update_follows_the_formula_with_its_warmup():
    """After each update, w_bar = d_t w_bar + (1 - d_t) w with d_t = min(d, (1 + t)/(10 + t)),
    starting from the model's weights; the first updates take in most of the new weights."""
    model = lm_model(seed=0)
    average = WeightAverage(model, 0.9)
    expected = {k: v.astype(np.float64) for k, v in weights(model).items()}
    g = np.random.default_rng(1)
    rates = []
    for t in range(1, 100):  # d_t reaches d = 0.9 at t = 81
        for p in model.parameters():
            p.data[...] += g.standard_normal(p.data.shape).astype(p.data.dtype)
        d = min(0.9, (1 + t) / (10 + t))
        rates.append(1 - d)
        assert math.isclose(average.rate(), 1 - d)
        average.update(model)
        now = weights(model)
        expected = {k: d * expected[k] + (1 - d) * now[k] for k in expected}
    assert rates[0] > 0.8 and rates[-1] == pytest.approx(0.1)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(average.shadow[name], expected[name], rtol=1e-5, atol=1e-5, err_msg=name)
    assert average.updates == 99


@pytest.mark.parametrize("decay", [0.0, 1.0, -0.5, 1.5])
def test_a_decay_outside_0_1_is_refused(decay):
    with pytest.raises(ValueError, match="decay must be in"):
        WeightAverage(lm_model(), decay)
    with pytest.raises(ValueError, match="TrainConfig.average must be a decay in"):
        TrainConfig(average=decay)


def test_applied_swaps_the_average_in_and_the_weights_back_even_on_error():
    """Inside ``applied`` the model holds the average; after it (an exception too) its own
    weights, in the same arrays (views of them, like an optimizer's flat layout, stay valid)."""
    model = lm_model(seed=0)
    average = WeightAverage(model, 0.5)
    for p in model.parameters():
        p.data[...] += 1.0
    average.update(model)
    own = weights(model)
    arrays = [p.data for p in model.parameters()]
    with pytest.raises(RuntimeError):
        with average.applied(model):
            for name, p in model.named_parameters():
                np.testing.assert_array_equal(p.data, average.shadow[name])
                assert not np.array_equal(p.data, own[name]), name
            raise RuntimeError("inside")
    assert_same_weights(weights(model), own)
    assert all(p.data is a for p, a in zip(model.parameters(), arrays))


def _fit(tmp_path, name, model, epochs, average=0.9, resume=None, max_steps=None):
    opt = AdamW(model, lr=WarmupCosineLR(5e-3, warmup=2, total=12), weight_decay=0.1)
    return fit(model, LMTask(), opt, lm_data(24), lm_data(6, seed=100), resume=resume,
               config=cfg(epochs=epochs, max_steps=max_steps, average=average, out_dir=str(tmp_path / name)))


def test_the_metric_and_best_npz_are_the_averages_and_last_npz_keeps_both(tmp_path):
    model = lm_model(seed=0)
    trainer = _fit(tmp_path, "run", model, epochs=3)
    rows = trainer.history
    assert all("val_loss" in r and "val_loss_trained" in r for r in rows)
    assert any(r["val_loss"] != r["val_loss_trained"] for r in rows)
    assert trainer.best == min(r["val_loss"] for r in rows)
    last = load_checkpoint(tmp_path / "run" / "last.npz")
    assert_same_weights(last.weights, weights(model))  # the weights being trained
    assert set(last.average_arrays) == set(last.weights) and last.meta["average"]["updates"] == trainer.step
    for name in last.weights:
        np.testing.assert_array_equal(last.average_arrays[name], trainer.average.shadow[name], err_msg=name)
    # the last epoch's metric is the one the model gives when it holds the average
    with trainer.average.applied(model):
        model.eval()
        again = LMTask().evaluate(model, trainer._val_batches())
    assert again["val_loss"] == pytest.approx(rows[-1]["val_loss"], rel=1e-6)


def test_best_npz_holds_the_average_marked_as_such(tmp_path):
    """After one epoch (the best so far) best.npz holds the average as that epoch left it, not the
    trained weights, says so in its metadata and does not hold it twice."""
    model = lm_model(seed=0)
    trainer = _fit(tmp_path, "one", model, epochs=1)
    best = load_checkpoint(tmp_path / "one" / "best.npz")
    assert_same_weights(best.weights, {k: np.asarray(v) for k, v in trainer.average.shadow.items()})
    assert not all(np.array_equal(best.weights[k], v) for k, v in weights(model).items())
    assert best.meta["average_applied"] is True and not best.average_arrays
    assert "average_applied" not in load_checkpoint(tmp_path / "one" / "last.npz").meta


@pytest.mark.parametrize("metric, val", [("train_loss", True), (None, False), ("val_loss_trained", True)])
def test_a_metric_that_does_not_judge_the_average_is_refused(tmp_path, metric, val):
    """best.npz keeps the average: the metric must be a validation metric of it, not the training
    loss (the default without validation data) nor the trained weights' own."""
    model = lm_model(seed=0)
    opt = AdamW(model, lr=1e-3)
    with pytest.raises(ValueError, match="does not judge the running average"):
        fit(model, LMTask(), opt, lm_data(24), lm_data(6, seed=100) if val else None,
            config=cfg(epochs=1, average=0.9, metric=metric, out_dir=str(tmp_path)))
    assert not (tmp_path / "best.npz").exists()


@pytest.mark.parametrize("split, total", [(2, 7), (3, 6)], ids=["mid_epoch", "at_epoch_end"])
def test_resume_goes_on_with_the_average_exactly(tmp_path, split, total):
    straight_model = lm_model(seed=0)
    straight = _fit(tmp_path, "a", straight_model, epochs=5, max_steps=total)
    first_model = lm_model(seed=0)
    _fit(tmp_path, "b", first_model, epochs=5, max_steps=split)
    resumed_model = lm_model(seed=7)
    resumed = _fit(tmp_path, "b", resumed_model, epochs=5, max_steps=total, resume=str(tmp_path / "b" / "last.npz"))
    assert_same_weights(weights(resumed_model), weights(straight_model))
    assert resumed.average.updates == straight.average.updates == total
    for name in straight.average.shadow:
        np.testing.assert_array_equal(resumed.average.shadow[name], straight.average.shadow[name], err_msg=name)


def test_a_run_without_an_average_resumed_with_one_starts_it_from_the_weights(tmp_path):
    model = lm_model(seed=0)
    _fit(tmp_path, "plain", model, epochs=1, average=None)
    assert not load_checkpoint(tmp_path / "plain" / "last.npz").average_arrays
    resumed = lm_model(seed=3)
    trainer = _fit(tmp_path, "plain", resumed, epochs=2, resume=str(tmp_path / "plain" / "last.npz"))
    assert trainer.average.updates == 3  # the second epoch's steps only


def test_a_non_finite_average_is_never_written(tmp_path):
    model = lm_model(seed=0)
    average = WeightAverage(model, 0.9)
    name = next(iter(average.shadow))
    average.shadow[name][...] = np.nan
    with pytest.raises(NonFiniteCheckpoint, match="weight average"):
        save_checkpoint(tmp_path / "x.npz", model, average=average.state())
    assert not (tmp_path / "x.npz").exists()
