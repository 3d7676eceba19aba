"""Tests for minitransformer.checkpoint: round trips, atomic writes, refusals, averaging.

Every refusal is checked twice: the error is a CheckpointError whose message says
what is wrong, and the model (and optimizer) it was meant for is left exactly as
it was.
"""
from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.checkpoint import (
    FORMAT_VERSION, Checkpoint, CheckpointError, average_checkpoints, load_checkpoint,
    model_from_checkpoint, restore, save_checkpoint,
)
from minitransformer.models import DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, Seq2Seq, Seq2SeqConfig
from minitransformer.optim import SGD, Adam, AdamW, WarmupCosineLR
from minitransformer.tasks import LMTask, MLMTask, Seq2SeqTask

V = 11
PAD, BOS, EOS, MASK = 0, 1, 2, 3


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def make_model(kind: str, seed: int = 0, **overrides):
    small = dict(max_len=16, d_model=16, n_heads=2, d_ff=32, seed=seed, emb_dropout=0.1, resid_dropout=0.1)
    if kind == "DecoderLM":
        return DecoderLM(DecoderLMConfig(vocab_size=V, **{"n_layers": 2, **small, **overrides}))
    if kind == "Encoder":
        return Encoder(EncoderConfig(vocab_size=V, n_outputs=3, **{"n_layers": 2, **small, **overrides}))
    if kind == "Seq2Seq":
        return Seq2Seq(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, n_enc_layers=1, n_dec_layers=2,
                                     **{**small, **overrides}))
    raise ValueError(kind)


def example_batch(kind: str):
    rng = np.random.default_rng(0)
    seqs = [[BOS] + list(rng.integers(4, V, size=n)) + [EOS] for n in (5, 8, 3, 8)]
    if kind == "DecoderLM":
        return LMTask(), LMTask().collate(seqs)
    if kind == "Encoder":
        task = MLMTask(mask_id=MASK, vocab_size=V, special_ids=(PAD, BOS, EOS), p=0.4)
        return task, task.collate(seqs)
    task = Seq2SeqTask()
    return task, task.collate([(s, [BOS] + s[1:-1][::-1] + [EOS]) for s in seqs])


def train_steps(model, optimizer, kind: str, n: int = 2):
    """A few real optimizer steps, so weights, moments and the dropout RNG all move."""
    task, batch = example_batch(kind)
    model.train()
    for i in range(n):
        task.loss(model, batch, np.random.default_rng(i))
        model.zero_grad()
        task.backward(model)
        optimizer.step()


def logits_of(model, kind: str):
    model.eval()
    _, batch = example_batch(kind)
    if kind == "DecoderLM":
        out = model(backend.asarray(batch))
    elif kind == "Encoder":
        out = model(backend.asarray(batch), head="mlm")
    else:
        out = model(backend.asarray(batch[0]), backend.asarray(batch[1]))
    return np.array(backend.to_numpy(out))


def weights(model) -> dict:
    return {k: v.copy() for k, v in model.state_dict().items()}


def assert_same_weights(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def optim_snapshot(opt) -> dict:
    sd = opt.state_dict()
    return {"t": sd["t"], "lr": sd["lr"],
            "state": {n: {k: v.copy() for k, v in s.items()} for n, s in sd["state"].items()}}


def assert_same_optim(a: dict, b: dict):
    assert a["t"] == b["t"] and a["lr"] == b["lr"]
    assert sorted(a["state"]) == sorted(b["state"])
    for n in a["state"]:
        assert sorted(a["state"][n]) == sorted(b["state"][n])
        for k in a["state"][n]:
            np.testing.assert_array_equal(a["state"][n][k], b["state"][n][k], err_msg=f"{n}.{k}")


class Vocab:
    """Anything with to_json() is saved as its JSON form."""

    def __init__(self, tokens):
        self.tokens = tokens

    def to_json(self):
        return {"tokens": self.tokens}


def write_npz(path, meta=None, **arrays):
    """Hand-made archive: ``meta`` (a dict) becomes the __meta__ JSON bytes."""
    if meta is not None:
        arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode("utf-8"), dtype=np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)
    return path


def load_into(model, path, optimizer=None):
    restore(model, load_checkpoint(path), optimizer)


KINDS = ["DecoderLM", "Encoder", "Seq2Seq"]


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
# atomic writes
# ---------------------------------------------------------------------------
def _crash_after_partial_write(exc):
    def bad_savez(file, *args, **kwargs):
        file.write(b"PK\x03\x04 half of an archive")
        raise exc
    return bad_savez


@pytest.mark.parametrize("exc", [OSError("disk full"), KeyboardInterrupt()])
def test_crash_mid_write_keeps_previous_checkpoint(tmp_path, monkeypatch, exc):
    model = make_model("DecoderLM")
    path = save_checkpoint(tmp_path / "last.npz", model)
    before = path.read_bytes()
    changed = make_model("DecoderLM", seed=8)
    monkeypatch.setattr(np, "savez", _crash_after_partial_write(exc))
    with pytest.raises(type(exc)):
        save_checkpoint(path, changed)
    monkeypatch.undo()
    assert path.read_bytes() == before  # the old checkpoint is intact ...
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.npz"]  # ... and no temp file is left
    assert_same_weights(load_checkpoint(path).weights, model.state_dict())


def test_crash_at_rename_keeps_previous_checkpoint(tmp_path, monkeypatch):
    model = make_model("Encoder")
    path = save_checkpoint(tmp_path / "best.npz", model)
    before = path.read_bytes()

    def bad_replace(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", bad_replace)
    with pytest.raises(OSError, match="power cut"):
        save_checkpoint(path, make_model("Encoder", seed=4))
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.npz"]


def test_crash_on_first_write_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(np, "savez", _crash_after_partial_write(OSError("boom")))
    with pytest.raises(OSError):
        save_checkpoint(tmp_path / "new.npz", make_model("DecoderLM"))
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_contents(tmp_path):
    a, b = make_model("DecoderLM", seed=1), make_model("DecoderLM", seed=2)
    path = save_checkpoint(tmp_path / "x.npz", a)
    save_checkpoint(path, b)
    assert_same_weights(load_checkpoint(path).weights, b.state_dict())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz"]


# ---------------------------------------------------------------------------
# refusals: clear CheckpointErrors, nothing changed
# ---------------------------------------------------------------------------
@pytest.fixture
def target():
    """A trained DecoderLM + Adam that a bad checkpoint must not touch."""
    model = make_model("DecoderLM", seed=21)
    opt = Adam(model, lr=1e-2)
    train_steps(model, opt, "DecoderLM", n=2)
    return model, opt


def _assert_untouched(model, opt, w_before, o_before, rng_before):
    assert_same_weights(weights(model), w_before)
    assert_same_optim(optim_snapshot(opt), o_before)
    assert model.rng.state_dict() == rng_before


def _refuse(path, target, match):
    model, opt = target
    w, o, r = weights(model), optim_snapshot(opt), model.rng.state_dict()
    with pytest.raises(CheckpointError, match=match) as info:
        load_into(model, path, opt)
    _assert_untouched(model, opt, w, o, r)
    return str(info.value)


@pytest.mark.parametrize("keep", [0.5, 0.9, -22, 1, 3, 0.0])
def test_truncated_file(tmp_path, target, keep):
    src = make_model("DecoderLM", seed=5)
    path = save_checkpoint(tmp_path / "t.npz", src, Adam(src))
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else (keep if keep > 0 else len(data) + keep)
    path.write_bytes(data[:n])
    msg = _refuse(path, target, "truncated or corrupted")
    assert str(path) in msg


def test_corrupted_bytes_inside_an_entry(tmp_path, target):
    src = make_model("DecoderLM", seed=5)
    path = save_checkpoint(tmp_path / "c.npz", src)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("weights/embed.tok.weight.npy")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 200  # inside the data
    data[start:start + 8] = b"\xff" * 8
    path.write_bytes(bytes(data))
    _refuse(path, target, "truncated or corrupted")


def test_random_npz_is_not_a_checkpoint(tmp_path, target):
    path = write_npz(tmp_path / "r.npz", a=np.arange(3.0), b=np.ones((2, 2)))
    msg = _refuse(path, target, "not a minitransformer checkpoint")
    assert "__meta__" in msg


@pytest.mark.parametrize("content", [b"epoch,loss\n1,0.5\n2,0.4\n", b"\x93NUMPY not really", b"{}"])
def test_other_files_are_not_checkpoints(tmp_path, target, content):
    path = tmp_path / "notes.npz"
    path.write_bytes(content)
    _refuse(path, target, "not a minitransformer checkpoint")


def test_plain_npy_is_not_a_checkpoint(tmp_path, target):
    path = tmp_path / "w.npy"
    np.save(path, np.arange(10))
    _refuse(path, target, "not a minitransformer checkpoint")


@pytest.mark.parametrize("meta_bytes, match", [
    (b"\xff\xfe not utf-8", "not valid JSON"),
    (b"{broken json", "not valid JSON"),
    (b"[1, 2, 3]", "not a minitransformer checkpoint"),
    (b'{"model_type": "DecoderLM"}', "no format version"),
])
def test_bad_metadata(tmp_path, target, meta_bytes, match):
    path = tmp_path / "m.npz"
    np.savez(path, __meta__=np.frombuffer(meta_bytes, dtype=np.uint8))
    _refuse(path, target, match)


def test_newer_format_version_is_refused(tmp_path, target):
    model, _ = target
    meta = {"format_version": FORMAT_VERSION + 1, "model_type": "DecoderLM", "config": model.config.to_dict()}
    arrays = {f"weights/{k}": v for k, v in model.state_dict().items()}
    path = write_npz(tmp_path / "future.npz", meta, **arrays)
    msg = _refuse(path, target, f"format {FORMAT_VERSION + 1}")
    assert "upgrade" in msg


def test_different_architecture_lists_names_and_shapes(tmp_path, target):
    wide = make_model("DecoderLM", d_model=32, n_heads=2, n_layers=3)
    path = save_checkpoint(tmp_path / "wide.npz", wide, Adam(wide))
    msg = _refuse(path, target, "different architecture")
    assert "\n" not in msg and str(path) in msg  # one line, naming the file
    assert "shape of " in msg and "32)" in msg and "16)" in msg  # a shape mismatch
    assert "not in model: blocks.2." in msg  # an extra layer
    assert "more" in msg and len(msg) < 600  # a few differences, then "... and N more"


def test_bad_config_of_a_loaded_checkpoint_names_the_file_not_the_arrays(tmp_path):
    """model_from_checkpoint(Checkpoint) with a bad config: one short line naming the file."""
    path = save_checkpoint(tmp_path / "m.npz", make_model("DecoderLM"))
    ckpt = load_checkpoint(path)
    assert ckpt.path == path and str(path) in repr(ckpt) and "array" not in repr(ckpt)
    ckpt.meta["config"]["d_model"] = 10**9
    with pytest.raises(CheckpointError) as info:
        model_from_checkpoint(ckpt)
    msg = str(info.value)
    assert str(path) in msg and "MAX_PARAMETERS" in msg and "\n" not in msg and len(msg) < 400
    ckpt.meta["config"]["d_model"] = 15  # not a multiple of n_heads: the config's own check
    with pytest.raises(CheckpointError) as info:
        model_from_checkpoint(ckpt)
    assert str(path) in str(info.value) and len(str(info.value)) < 400


def test_different_model_type_is_refused(tmp_path):
    enc = make_model("Encoder")
    path = save_checkpoint(tmp_path / "enc.npz", enc)
    model = make_model("DecoderLM", seed=4)
    before = weights(model)
    with pytest.raises(CheckpointError, match="model type: checkpoint Encoder, model DecoderLM"):
        load_into(model, path)
    assert_same_weights(weights(model), before)


def test_pickled_objects_are_refused_not_executed(tmp_path, target):
    model, _ = target
    meta = {"format_version": FORMAT_VERSION, "model_type": "DecoderLM"}
    arrays = {f"weights/{k}": v for k, v in model.state_dict().items()}
    arrays["weights/payload"] = np.array([{"evil": print}, None], dtype=object)
    path = write_npz(tmp_path / "evil.npz", meta, **arrays)
    msg = _refuse(path, target, "pickled")
    assert "allow_pickle" in msg


@pytest.mark.parametrize("case", ["type", "shape", "missing"])
def test_optimizer_mismatch_leaves_model_and_optimizer_untouched(tmp_path, target, case):
    model, opt = target
    src = make_model("DecoderLM", seed=2)
    if case == "type":  # same model, but SGD state where Adam is expected
        src_opt = SGD(src, lr=0.1, momentum=0.9)
        train_steps(src, src_opt, "DecoderLM", n=1)
        path = save_checkpoint(tmp_path / "o.npz", src, src_opt)
        match = "optimizer state does not fit"
    else:  # Adam state edited by hand
        src_opt = Adam(src)
        train_steps(src, src_opt, "DecoderLM", n=1)
        path = save_checkpoint(tmp_path / "o.npz", src, src_opt)
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        if case == "shape":
            arrays["optim/head.linear.weight/m"] = np.zeros((3, 3), np.float32)
            match = "head.linear.weight.m: shape"
        else:
            meta = json.loads(arrays["__meta__"].tobytes())
            del arrays["optim/head.linear.bias/v"]
            meta["entries"].remove("optim/head.linear.bias/v")  # a consistent file: restore must refuse it
            arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
            match = "head.linear.bias: state keys"
        np.savez(path, **arrays)
    _refuse(path, target, match)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        load_checkpoint("/nonexistent/ck.npz")


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


# ---------------------------------------------------------------------------
# non-finite values are never written and never loaded
# ---------------------------------------------------------------------------
def _meta_of(model, opt=None) -> dict:
    """The metadata save_checkpoint would write for ``model`` (for hand-made archives)."""
    meta = {"format_version": FORMAT_VERSION, "model_type": type(model).__name__,
            "config": model.config.to_dict(), "model_rng": model.rng.state_dict()}
    if opt is not None:
        sd = opt.state_dict()
        meta["optimizer"] = {**{k: v for k, v in sd.items() if k != "state"}, "state_names": sorted(sd["state"])}
    return meta


def _archive_arrays(model, opt=None) -> dict:
    arrays = {f"weights/{k}": v for k, v in model.state_dict().items()}
    if opt is not None:
        for name, slots in opt.state_dict()["state"].items():
            for slot, arr in slots.items():
                arrays[f"optim/{name}/{slot}"] = arr
    return arrays


@pytest.mark.parametrize("where", ["weight", "optimizer"])
@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_save_refuses_non_finite_values_and_keeps_the_old_file(tmp_path, where, bad):
    model = make_model("DecoderLM")
    opt = Adam(model, lr=1e-2)
    train_steps(model, opt, "DecoderLM", n=1)
    path = save_checkpoint(tmp_path / "last.npz", model, opt)
    before = path.read_bytes()
    if where == "weight":
        dict(model.named_parameters())["blocks.1.ff.fc2.weight"].data[0, 3] = bad
        name = "weight blocks.1.ff.fc2.weight"
    else:
        opt.state["blocks.0.ln1.bias"]["v"][2] = bad
        name = "optimizer state blocks.0.ln1.bias/v"
    with pytest.raises(CheckpointError, match=f"non-finite .* {name}") as info:
        save_checkpoint(path, model, opt)
    assert "\n" not in str(info.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.npz"]  # no temp file either


@pytest.mark.parametrize("where", ["weight", "optimizer"])
def test_load_refuses_non_finite_values_naming_the_tensor(tmp_path, target, where):
    src = make_model("DecoderLM", seed=4)
    opt = Adam(src, lr=1e-2)
    train_steps(src, opt, "DecoderLM", n=1)
    arrays = _archive_arrays(src, opt)
    key = "weights/embed.tok.weight" if where == "weight" else "optim/head.linear.bias/m"
    arrays[key] = arrays[key].copy()
    arrays[key].flat[1] = np.nan
    path = write_npz(tmp_path / "nan.npz", _meta_of(src, opt), **arrays)
    msg = _refuse(path, target, "non-finite")
    assert key.split("/", 1)[1] in msg and "\n" not in msg
    with pytest.raises(CheckpointError, match="non-finite"):
        model_from_checkpoint(path)


def test_restore_refuses_a_checkpoint_object_with_non_finite_weights(target):
    model, opt = target
    w = {k: v.copy() for k, v in model.state_dict().items()}
    w["head.linear.weight"][0, 0] = np.inf
    ckpt = Checkpoint(weights=w, meta=_meta_of(model))
    before, o, r = weights(model), optim_snapshot(opt), model.rng.state_dict()
    with pytest.raises(CheckpointError, match="non-finite .*head.linear.weight"):
        restore(model, ckpt)
    _assert_untouched(model, opt, before, o, r)


@pytest.mark.parametrize("change, match", [
    ({"lr": -1.0}, "lr must be finite and >= 0"),
    ({"betas": [5.0, 0.999]}, r"betas must be in \[0, 1\)"),
    ({"eps": -1.0}, "eps must be finite and > 0"),
])
def test_restore_refuses_bad_optimizer_settings(tmp_path, target, change, match):
    src = make_model("DecoderLM", seed=4)
    opt = Adam(src, lr=1e-2)
    train_steps(src, opt, "DecoderLM", n=1)
    meta = _meta_of(src, opt)
    meta["optimizer"].update(change)
    path = write_npz(tmp_path / "bad_opt.npz", meta, **_archive_arrays(src, opt))
    _refuse(path, target, match)


# ---------------------------------------------------------------------------
# hostile checkpoints are refused before they can allocate much memory
# ---------------------------------------------------------------------------
def test_declared_parameter_count_is_an_upper_bound():
    """The bound computed from a config's fields is never below the real model's size."""
    from minitransformer.checkpoint import declared_parameters
    cases = [make_model("DecoderLM"), make_model("DecoderLM", tie_embeddings=True, bias=False, d_head=12),
             make_model("Encoder"), make_model("Encoder", pos="sinusoidal", tie_embeddings=False),
             make_model("Seq2Seq"), make_model("Seq2Seq", share_embeddings=True, tie_embeddings=True)]
    for model in cases:
        actual = sum(int(np.prod(v.shape)) for v in model.state_dict().values())
        declared = declared_parameters(type(model).__name__, model.config.to_dict())
        assert actual <= declared <= 2 * actual + 4096, (type(model).__name__, actual, declared)


@pytest.mark.parametrize("change, match", [
    ({"d_model": 10**6, "n_heads": 1}, "parameters"),
    ({"n_layers": 10**9}, "parameters"),
    ({"max_len": 10**12}, "parameters"),
    ({"vocab_size": -5}, "vocab_size"),
    ({"d_model": "64"}, "d_model"),
    ({"n_layers": 2.5}, "n_layers"),
], ids=["d_model_1e6", "layers_1e9", "max_len_1e12", "negative_vocab", "string_d_model", "fractional_layers"])
def test_absurd_config_is_refused_before_the_model_is_built(tmp_path, monkeypatch, change, match):
    model = make_model("DecoderLM")
    meta = _meta_of(model)
    meta["config"].update(change)
    path = write_npz(tmp_path / "huge.npz", meta, **_archive_arrays(model))

    def no_build(self, config):
        raise AssertionError("the model was built from an unchecked config")

    monkeypatch.setattr(DecoderLM, "__init__", no_build)
    with pytest.raises(CheckpointError, match=match) as info:
        model_from_checkpoint(path)
    assert "\n" not in str(info.value)


def _zip_with_member(path, name, n_zero_bytes, chunk=1 << 20):
    """A small zip whose member ``name`` holds ``n_zero_bytes`` zeros (deflated: tiny on disk),
    written in chunks so that the test never holds much memory."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("__meta__.npy", b"")  # a name the reader expects, so the size check decides
        with zf.open(name, "w", force_zip64=True) as f:
            zero = bytes(chunk)
            for start in range(0, n_zero_bytes, chunk):
                f.write(zero[: min(chunk, n_zero_bytes - start)])
    return path


def _no_member_reads(monkeypatch):
    def refuse(self, *args, **kwargs):
        raise AssertionError("a member was read before the directory was checked")
    monkeypatch.setattr(zipfile.ZipFile, "open", refuse)


def test_zip_bomb_is_refused_from_the_directory_before_any_read(tmp_path, monkeypatch):
    path = _zip_with_member(tmp_path / "bomb.npz", "weights/x.npy", 40 * 2**20)  # 40 MiB of zeros
    assert path.stat().st_size < 2**20
    from minitransformer.checkpoint import limits
    monkeypatch.setattr(limits, "MAX_UNCOMPRESSED_FLOOR", 2**20)  # keep the test small: a floor of 1 MiB
    _no_member_reads(monkeypatch)
    with pytest.raises(CheckpointError, match="declares .* uncompressed") as info:
        load_checkpoint(path)
    assert "\n" not in str(info.value)


def test_total_size_cap_is_checked_before_any_read(tmp_path, monkeypatch):
    from minitransformer.checkpoint import limits
    model = make_model("DecoderLM")
    path = save_checkpoint(tmp_path / "ok.npz", model)
    load_checkpoint(path)  # fine under the real limits
    monkeypatch.setattr(limits, "MAX_CHECKPOINT_BYTES", 1000)
    _no_member_reads(monkeypatch)
    with pytest.raises(CheckpointError, match="MAX_CHECKPOINT_BYTES"):
        load_checkpoint(path)


def test_array_header_declaring_more_than_its_member_holds_is_refused(tmp_path, target):
    """A .npy header may claim any shape; numpy would allocate it before reading. The
    claim is compared with the member's size first (here 8 TB claimed, 80 bytes stored)."""
    model, _ = target
    arrays = _archive_arrays(model)
    path = write_npz(tmp_path / "liar.npz", _meta_of(model), **arrays)
    header = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("weights/extra.npy", buf.getvalue() + bytes(80))
    msg = _refuse(path, target, "weights/extra.npy")
    assert "declares" in msg and "\n" not in msg


def test_weight_shapes_are_checked_against_the_config_before_the_weights_are_read(tmp_path, monkeypatch):
    from minitransformer.checkpoint import files
    model = make_model("DecoderLM")
    arrays = _archive_arrays(model)
    arrays["weights/embed.tok.weight"] = np.zeros((V, 160), np.float32)  # the config says (V, 16)
    path = write_npz(tmp_path / "wide.npz", _meta_of(model), **arrays)
    read = []
    real = files._read_array
    monkeypatch.setattr(files, "_read_array", lambda zf, name: read.append(name) or real(zf, name))
    with pytest.raises(CheckpointError, match=r"shape of embed.tok.weight: model \(11, 16\), checkpoint \(11, 160\)"):
        model_from_checkpoint(path)
    assert not [n for n in read if n.startswith("weights/")]


def test_the_limits_are_read_from_their_module(tmp_path, monkeypatch):
    """minitransformer.checkpoint.limits is the one home of the limits: lowering one there
    refuses a file that fits the default, and the message says where to raise it."""
    from minitransformer import checkpoint
    from minitransformer.checkpoint import limits
    assert checkpoint.MAX_PARAMETERS == limits.MAX_PARAMETERS  # re-exported for reading
    path = save_checkpoint(tmp_path / "ok.npz", make_model("DecoderLM"))
    monkeypatch.setattr(limits, "MAX_PARAMETERS", 10)
    with pytest.raises(CheckpointError, match=r"MAX_PARAMETERS=10 of minitransformer\.checkpoint\.limits"):
        model_from_checkpoint(path)


# ---------------------------------------------------------------------------
# crafted metadata and integer arrays: refused by load_checkpoint, one line naming file and entry
# ---------------------------------------------------------------------------
def _crafted(tmp_path, change, name="c.npz"):
    model = make_model("DecoderLM")
    path = save_checkpoint(tmp_path / "src.npz", model, Adam(model), vocab=Vocab([str(i) for i in range(11)]),
                           extra={"trainer": {"epoch": 1, "batch": 0, "step": 2, "best": 1.5, "best_epoch": 1,
                                              "bad_epochs": 0, "history": []}})
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    change(meta, arrays)
    return write_npz(tmp_path / name, meta, **arrays)


@pytest.mark.parametrize("change, match", [
    (lambda m, a: m.update(model_rng={}), "'model_rng'"),
    (lambda m, a: m.update(model_rng={"seed": "abc", "counter": 0}), "'model_rng'"),
    (lambda m, a: m.update(vocab=123), "'vocab'"),
    (lambda m, a: m.update(vocab={"format": "x", "version": 2}), "no 'tokens'"),
    (lambda m, a: m.update(vocab={"tokens": [1, 2]}), "not a list of strings"),
    (lambda m, a: m.update(vocab={"format": "x", "tokens": ["a", "b"]}), "2 tokens .* vocabulary size is 11"),
    (lambda m, a: m.update(trainer="garbage"), "'trainer' is a str"),
    (lambda m, a: m.update(trainer={"epoch": 0}), "'trainer' has batch missing"),
    (lambda m, a: a.update({"weights/ln_f.weight": a["weights/ln_f.weight"].astype(np.int32)}),
     "weight ln_f.weight holds int32"),
    (lambda m, a: a.update({k: a[k].astype(np.int64) for k in a if k.startswith("optim/")}), "optimizer state .* int64"),
])
def test_crafted_metadata_and_integer_arrays_are_refused_on_load(tmp_path, change, match):
    path = _crafted(tmp_path, change)
    with pytest.raises(CheckpointError, match=match) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert str(path) in msg and "\n" not in msg and len(msg) < 400
    load_checkpoint(_crafted(tmp_path, lambda m, a: None, "ok.npz"))  # the untouched file loads
