"""Divergence (minitransformer.train.divergence): a non-finite loss, gradient, weight or
optimizer state stops training before it reaches a saved file, and the message names the
step and the real last good checkpoint."""
from __future__ import annotations

import numpy as np
import pytest

from minitransformer import backend, devices
from minitransformer.checkpoint import load_checkpoint, save_checkpoint
from minitransformer.optim import Adam
from minitransformer.train.tasks import LMTask
from minitransformer.train import TrainingDiverged, fit
from train_helpers import assert_same_weights, cfg, lm_data, lm_model, saved_files, weights, WrappedTask


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
    assert saved_files(tmp_path) == []


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
    assert saved_files(tmp_path) == []


def test_non_finite_optimizer_state_is_never_saved(tmp_path):
    model = lm_model()
    opt = Adam(model, lr=1e-3)
    _poison_after_step(opt, 3, what="moment")
    with pytest.raises(TrainingDiverged) as info:
        fit(model, LMTask(), opt, lm_data(24), config=cfg(epochs=3, out_dir=str(tmp_path)))
    msg = str(info.value)
    assert "optimizer state blocks.0.ln1.bias/v" in msg and "step 3" in msg and "none saved yet" in msg, msg
    assert saved_files(tmp_path) == []


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

    def guarded(self, batch, rng, check_now, normaliser=None):
        assert not check_now
        with devices.forbid_host_sync():
            out = orig(self, batch, rng, check_now, normaliser)
        seen.append(self.step)
        return out

    monkeypatch.setattr(Trainer, "_step", guarded)
    model = lm_model()
    fit(model, LMTask(), Adam(model, lr=1e-3), lm_data(24), config=cfg(epochs=2, sync_every=4))
    assert len(seen) == 6 and _all_finite(model)
