"""What training refuses before it starts (minitransformer.train.config and the trainer's
checks): an unknown or NaN early-stopping metric, validation data without scored tokens,
degenerate examples, bad config values."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.checkpoint import load_checkpoint
from minitransformer.models import PropertyModel, PropertyModelConfig
from minitransformer.optim import Adam
from minitransformer.train.tasks import LMTask
from minitransformer.train import TrainConfig, TrainingDiverged, fit
from train_helpers import (
    assert_same_weights, BOS, cfg, EOS, lm_data, lm_model, mlm_model, mlm_task, PAD, saved_files, V, weights,
)


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
    assert task.losses == 0 and saved_files(tmp_path) == []


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
    assert saved_files(tmp_path) == []


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
        assert saved_files(tmp_path) == [] and "none saved yet" in str(info.value)
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
    from minitransformer.train.tasks import PropertyTask
    if case == "lm_only_padding":
        model, task, train, val = lm_model(), CountingLM(), lm_data(16), [[BOS, PAD, PAD]]
    elif case == "mlm_only_special_tokens":
        model, task, train, val = mlm_model(), mlm_task(), lm_data(16), [[BOS, EOS], [BOS, EOS]]
    else:
        model = PropertyModel(PropertyModelConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=1,
                                                  d_ff=32, n_outputs=2))
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
    assert task.losses == 0 and saved_files(tmp_path) == []


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
    (dict(clip=-1.0), "clip"), (dict(clip=float("nan")), "clip"), (dict(clip=True), "clip"),
    (dict(patience=0), "patience"),
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
