"""Writing checkpoints: atomic (a crash mid-write keeps the previous file), and never a
non-finite value written or loaded."""
from __future__ import annotations

import os

import numpy as np
import pytest

from minitransformer.checkpoint import (
    Checkpoint, CheckpointError, load_checkpoint, model_from_checkpoint, restore, save_checkpoint,
)
from minitransformer.optim import Adam
from checkpoint_helpers import (
    archive_arrays, assert_same_weights, assert_untouched, make_model, meta_of, optim_snapshot, refuse,
    train_steps, weights, write_npz,
)


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
    model = make_model("MaskedLM")
    path = save_checkpoint(tmp_path / "best.npz", model)
    before = path.read_bytes()

    def bad_replace(src, dst):
        raise OSError("power cut")

    monkeypatch.setattr(os, "replace", bad_replace)
    with pytest.raises(OSError, match="power cut"):
        save_checkpoint(path, make_model("MaskedLM", seed=4))
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
# non-finite values are never written and never loaded
# ---------------------------------------------------------------------------
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
    arrays = archive_arrays(src, opt)
    key = "weights/embed.tok.weight" if where == "weight" else "optim/head.linear.bias/m"
    arrays[key] = arrays[key].copy()
    arrays[key].flat[1] = np.nan
    path = write_npz(tmp_path / "nan.npz", meta_of(src, opt), **arrays)
    msg = refuse(path, target, "non-finite")
    assert key.split("/", 1)[1] in msg and "\n" not in msg
    with pytest.raises(CheckpointError, match="non-finite"):
        model_from_checkpoint(path)


def test_restore_refuses_a_checkpoint_object_with_non_finite_weights(target):
    model, opt = target
    w = {k: v.copy() for k, v in model.state_dict().items()}
    w["head.linear.weight"][0, 0] = np.inf
    ckpt = Checkpoint(weights=w, meta=meta_of(model))
    before, o, r = weights(model), optim_snapshot(opt), model.rng.state_dict()
    with pytest.raises(CheckpointError, match="non-finite .*head.linear.weight"):
        restore(model, ckpt)
    assert_untouched(model, opt, before, o, r)


@pytest.mark.parametrize("change, match", [
    ({"lr": -1.0}, "lr must be finite and >= 0"),
    ({"betas": [5.0, 0.999]}, r"betas must be in \[0, 1\)"),
    ({"eps": -1.0}, "eps must be finite and > 0"),
])
def test_restore_refuses_bad_optimizer_settings(tmp_path, target, change, match):
    src = make_model("DecoderLM", seed=4)
    opt = Adam(src, lr=1e-2)
    train_steps(src, opt, "DecoderLM", n=1)
    meta = meta_of(src, opt)
    meta["optimizer"].update(change)
    path = write_npz(tmp_path / "bad_opt.npz", meta, **archive_arrays(src, opt))
    refuse(path, target, match)


