"""Exact resume (minitransformer.train.checkpointing): a run stopped anywhere and resumed
equals one that never stopped; a resume with another vocabulary or other data settings
(the fingerprint) is refused."""
from __future__ import annotations

import json

import numpy as np
import pytest

from minitransformer.checkpoint import load_checkpoint, save_checkpoint
from minitransformer.optim import SGD, Adam, AdamW, NoamLR, WarmupCosineLR
from minitransformer.train.tasks import LMTask, Seq2SeqTask
from minitransformer.train import fit
from train_helpers import assert_same_weights, cfg, lm_data, lm_model, mlm_model, mlm_task, s2s_data, s2s_model, weights


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
    # the epoch records agree too (apart from wall time and throughput), the mean training loss of the
    # epoch cut by the stop included: its first steps' losses come with the checkpoint
    drop = ("time_s", "tokens_per_s")
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
