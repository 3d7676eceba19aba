"""Checkpoints round-trip (minitransformer.checkpoint): every model family and its optimizer
restored exactly, plain numeric arrays only, models rebuilt from the file alone, across
backends; averaging."""
from __future__ import annotations

import json

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.checkpoint import (
    FORMAT_VERSION, Checkpoint, CheckpointError, average_checkpoints, load_checkpoint, model_from_checkpoint,
    model_sha256, restore, save_checkpoint,
)
from minitransformer.optim import Adam, AdamW, WarmupCosineLR
from checkpoint_helpers import (
    assert_same_optim, assert_same_weights, KINDS, load_into, logits_of, make_model, optim_snapshot,
    train_steps, Vocab, weights, write_npz,
)


# ---------------------------------------------------------------------------
# round trips
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_restores_everything(kind, tmp_path):
    model = make_model(kind, seed=1)
    opt = AdamW(model, lr=WarmupCosineLR(1e-2, warmup=2, total=20), weight_decay=0.01)
    train_steps(model, opt, kind, n=3)
    assert model.rng.counter > 0 and opt.t == 3
    vocab = Vocab(["<pad>", "<bos>", "<eos>", "<mask>"] + list("abcdefg"))
    path = save_checkpoint(tmp_path / "ck.npz", model, opt, vocab=vocab, extra={"note": "hello", "epoch": 4})
    assert path == tmp_path / "ck.npz" and path.exists()

    ckpt = load_checkpoint(path)
    assert ckpt.meta["format_version"] == FORMAT_VERSION
    assert ckpt.model_type == kind
    assert ckpt.config == model.config.to_dict()
    assert ckpt.vocab == {"tokens": vocab.tokens}
    assert ckpt.meta["note"] == "hello" and ckpt.meta["epoch"] == 4
    assert ckpt.meta["model_rng"] == model.rng.state_dict()
    assert_same_weights(ckpt.weights, model.state_dict())
    sd = ckpt.optimizer_state()
    assert sd["t"] == 3 and sd["type"] == "AdamW" and sd["lr"] == opt.lr
    assert_same_optim({"t": sd["t"], "lr": sd["lr"], "state": sd["state"]}, optim_snapshot(opt))
    assert any(np.any(v["m"] != 0) for v in sd["state"].values())  # the moments are really saved

    # into a fresh model with a different init and a fresh optimizer
    other = make_model(kind, seed=99)
    opt2 = AdamW(other, lr=WarmupCosineLR(1e-2, warmup=2, total=20), weight_decay=0.01)
    restore(other, ckpt, opt2)
    assert_same_weights(weights(other), weights(model))
    assert_same_optim(optim_snapshot(opt2), optim_snapshot(opt))
    assert other.rng.state_dict() == model.rng.state_dict()
    np.testing.assert_array_equal(logits_of(other, kind), logits_of(model, kind))

    # and both continue identically (moments, t and the dropout stream all carried over)
    train_steps(model, opt, kind, n=2)
    train_steps(other, opt2, kind, n=2)
    assert_same_weights(weights(other), weights(model))
    assert opt2.t == opt.t == 5


def test_plain_json_vocab_and_no_optimizer(tmp_path):
    model = make_model("DecoderLM")
    path = save_checkpoint(tmp_path / "sub" / "dir" / "m.npz", model, vocab={"a": 4, "b": 5})
    ckpt = load_checkpoint(path)
    assert ckpt.vocab == {"a": 4, "b": 5}
    assert ckpt.optimizer_state() is None
    assert ckpt.optim_arrays == {}
    other = make_model("DecoderLM", seed=5)
    before = weights(other)
    with pytest.raises(CheckpointError, match="no optimizer state"):
        restore(other, ckpt, Adam(other))
    assert_same_weights(weights(other), before)
    restore(other, ckpt)  # weights alone are fine
    assert_same_weights(weights(other), weights(model))


def test_archive_holds_only_plain_numeric_arrays(tmp_path):
    model = make_model("Seq2Seq")
    opt = Adam(model)
    train_steps(model, opt, "Seq2Seq", n=1)
    path = save_checkpoint(tmp_path / "c.npz", model, opt)
    with np.load(path, allow_pickle=False) as z:  # would raise on any object array
        for name in z.files:
            assert z[name].dtype != object
        names = set(z.files)
    assert "__meta__" in names
    assert {f"weights/{n}" for n in model.state_dict()} <= names
    assert {f"optim/{n}/m" for n in model.state_dict()} <= names


@pytest.mark.parametrize("pos", [dict(pos="sinusoidal"), dict(pos="relative", relative_max_distance=2),
                                 dict(pos="learned", relative_bias="alibi")],
                         ids=["sinusoidal", "relative", "learned-beside-alibi"])
@pytest.mark.parametrize("kind", KINDS)
def test_model_from_checkpoint_rebuilds_identical_model(kind, pos, tmp_path):
    model = make_model(kind, seed=3, norm="post", **pos)
    opt = Adam(model, lr=1e-2)
    train_steps(model, opt, kind, n=2)
    path = save_checkpoint(tmp_path / "m.npz", model, opt)
    rebuilt, ckpt = model_from_checkpoint(path)
    assert type(rebuilt) is type(model) and isinstance(ckpt, Checkpoint)
    assert rebuilt.config == model.config
    assert not rebuilt.training  # returned in eval mode
    assert_same_weights(weights(rebuilt), weights(model))
    np.testing.assert_array_equal(logits_of(rebuilt, kind), logits_of(model, kind))
    again, _ = model_from_checkpoint(ckpt)  # a loaded Checkpoint works too
    np.testing.assert_array_equal(logits_of(again, kind), logits_of(model, kind))


def test_checkpoint_saved_before_relative_positions_loads(tmp_path):
    """A checkpoint whose config predates relative_bias / relative_max_distance loads
    with the defaults (no relative bias) and gives the saved model's logits."""
    model = make_model("DecoderLM", seed=2)
    path = save_checkpoint(tmp_path / "new.npz", model)
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes().decode("utf-8"))
    meta["config"] = {k: v for k, v in meta["config"].items() if not k.startswith("relative_")}
    old = write_npz(tmp_path / "old.npz", meta, **arrays)
    rebuilt, _ = model_from_checkpoint(old)
    assert rebuilt.config == model.config and rebuilt.config.relative_bias == "none"
    np.testing.assert_array_equal(logits_of(rebuilt, "DecoderLM"), logits_of(model.eval(), "DecoderLM"))


def test_model_from_checkpoint_unknown_type(tmp_path):
    model = make_model("DecoderLM")
    path = save_checkpoint(tmp_path / "m.npz", model, extra={"model_type": "Mystery"})
    with pytest.raises(CheckpointError, match="unknown model type 'Mystery'"):
        model_from_checkpoint(path)


# ---------------------------------------------------------------------------
# across backends (strict is the CPU stand-in for CuPy)
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("save_on, load_on", [("strict", "numpy"), ("numpy", "strict")])
@pytest.mark.parametrize("kind", ["DecoderLM", "Seq2Seq"])
def test_checkpoint_moves_between_backends(tmp_path, save_on, load_on, kind):
    backend.use(save_on)
    model = make_model(kind, seed=6)
    opt = Adam(model, lr=1e-2)
    train_steps(model, opt, kind, n=2)
    path = save_checkpoint(tmp_path / "x.npz", model, opt)
    expected_w, expected_o = weights(model), optim_snapshot(opt)
    expected_logits = logits_of(model, kind)
    rng_state = model.rng.state_dict()

    backend.use(load_on)
    other = make_model(kind, seed=0)
    opt2 = Adam(other, lr=1e-2)
    load_into(other, path, opt2)
    for p in other.parameters():
        assert backend.is_device_array(p.data)  # arrays of the loading backend
    for st in opt2.state.values():
        assert all(backend.is_device_array(a) for a in st.values())
    assert_same_weights(weights(other), expected_w)
    assert_same_optim(optim_snapshot(opt2), expected_o)
    assert other.rng.state_dict() == rng_state
    np.testing.assert_allclose(logits_of(other, kind), expected_logits, rtol=1e-6, atol=1e-6)
    rebuilt, _ = model_from_checkpoint(path)
    np.testing.assert_allclose(logits_of(rebuilt, kind), expected_logits, rtol=1e-6, atol=1e-6)
    train_steps(other, opt2, kind, n=1)  # and training continues on the new backend
    assert opt2.t == 3


# ---------------------------------------------------------------------------
# averaging
# ---------------------------------------------------------------------------
def test_average_checkpoints(tmp_path):
    models = [make_model("Seq2Seq", seed=s) for s in (1, 2, 3)]
    paths = [save_checkpoint(tmp_path / f"c{i}.npz", m) for i, m in enumerate(models)]
    avg = average_checkpoints(paths)
    sds = [m.state_dict() for m in models]
    assert sorted(avg) == sorted(sds[0])
    for k in avg:
        assert avg[k].dtype == sds[0][k].dtype
        expected = (sds[0][k].astype(np.float64) + sds[1][k] + sds[2][k]) / 3
        np.testing.assert_allclose(avg[k], expected, rtol=1e-6, atol=1e-7, err_msg=k)
    # not a copy of any one input
    assert not np.allclose(avg["src_embed.tok.weight"], sds[0]["src_embed.tok.weight"])
    target = make_model("Seq2Seq", seed=9)
    target.load_state_dict(avg)
    assert_same_weights(weights(target), avg)
    # a single checkpoint averages to itself; a checkpoint twice counts twice
    assert_same_weights(average_checkpoints(paths[:1]), sds[0])
    twice = average_checkpoints([paths[0], paths[0], paths[1]])
    k = "dec_blocks.0.ff.fc1.weight" if "dec_blocks.0.ff.fc1.weight" in twice else sorted(twice)[0]
    np.testing.assert_allclose(twice[k], (2 * sds[0][k].astype(np.float64) + sds[1][k]) / 3, rtol=1e-6, atol=1e-7)


def test_average_checkpoints_rejects_mixed_architectures(tmp_path):
    a = save_checkpoint(tmp_path / "a.npz", make_model("DecoderLM"))
    b = save_checkpoint(tmp_path / "b.npz", make_model("DecoderLM", d_model=32))
    c = save_checkpoint(tmp_path / "c.npz", make_model("DecoderLM", n_layers=3))
    with pytest.raises(CheckpointError, match="different architecture"):
        average_checkpoints([a, b])
    with pytest.raises(CheckpointError, match="different architecture"):
        average_checkpoints([a, c])
    with pytest.raises(ValueError, match="at least one"):
        average_checkpoints([])




def test_the_model_digest_is_the_same_for_two_files_of_one_model_and_differs_for_other_weights(tmp_path):
    """model_sha256 reads the weights, model type, configuration and vocabulary, not the record of
    the run: a file saved again with other metadata gives the same digest, one changed weight another."""
    model = make_model("DecoderLM", seed=1)
    first = load_checkpoint(save_checkpoint(tmp_path / "a.npz", model, vocab={"a": 4}, extra={"epoch": 1}))
    again = load_checkpoint(save_checkpoint(tmp_path / "b.npz", model, vocab={"a": 4}, extra={"epoch": 9}))
    assert (tmp_path / "a.npz").read_bytes() != (tmp_path / "b.npz").read_bytes()
    assert model_sha256(first) == model_sha256(again)
    other_vocab = load_checkpoint(save_checkpoint(tmp_path / "c.npz", model, vocab={"a": 5}))
    assert model_sha256(other_vocab) != model_sha256(first)
    _, weight = next(model.named_parameters())
    weight.data.flat[0] += 1e-3
    changed = load_checkpoint(save_checkpoint(tmp_path / "d.npz", model, vocab={"a": 4}))
    assert model_sha256(changed) != model_sha256(first)
