"""Shared by the tests of minitransformer.checkpoint: small models of each family, a few
training steps, snapshots of weights and optimizer state, raw archive writing, and the check
that a refused checkpoint changed nothing."""
from __future__ import annotations

import json

import numpy as np
import pytest

from minitransformer import backend
from minitransformer.checkpoint import FORMAT_VERSION, CheckpointError, load_checkpoint, restore
from minitransformer.models import (
    DecoderLM, DecoderLMConfig, EncoderConfig, MaskedLM, PropertyModel, PropertyModelConfig, Seq2Seq, Seq2SeqConfig,
)
from minitransformer.train.tasks import LMTask, MLMTask, Seq2SeqTask

V = 11
PAD, BOS, EOS, MASK = 0, 1, 2, 3


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def make_model(kind: str, seed: int = 0, **overrides):
    small = dict(max_len=16, d_model=16, n_heads=2, d_ff=32, seed=seed, emb_dropout=0.1, resid_dropout=0.1)
    if kind == "DecoderLM":
        return DecoderLM(DecoderLMConfig(vocab_size=V, **{"n_layers": 2, **small, **overrides}))
    if kind == "MaskedLM":
        return MaskedLM(EncoderConfig(vocab_size=V, **{"n_layers": 2, **small, **overrides}))
    if kind == "PropertyModel":
        return PropertyModel(PropertyModelConfig(vocab_size=V, n_outputs=3, **{"n_layers": 2, **small, **overrides}))
    if kind == "Seq2Seq":
        return Seq2Seq(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, n_enc_layers=1, n_dec_layers=2,
                                     **{**small, **overrides}))
    raise ValueError(kind)


def example_batch(kind: str):
    rng = np.random.default_rng(0)
    seqs = [[BOS] + list(rng.integers(4, V, size=n)) + [EOS] for n in (5, 8, 3, 8)]
    if kind == "DecoderLM":
        return LMTask(), LMTask().collate(seqs)
    if kind == "MaskedLM":
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
    elif kind == "MaskedLM":
        out = model(backend.asarray(batch))
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


KINDS = ["DecoderLM", "MaskedLM", "Seq2Seq"]


def assert_untouched(model, opt, w_before, o_before, rng_before):
    assert_same_weights(weights(model), w_before)
    assert_same_optim(optim_snapshot(opt), o_before)
    assert model.rng.state_dict() == rng_before


def refuse(path, target, match):
    model, opt = target
    w, o, r = weights(model), optim_snapshot(opt), model.rng.state_dict()
    with pytest.raises(CheckpointError, match=match) as info:
        load_into(model, path, opt)
    assert_untouched(model, opt, w, o, r)
    return str(info.value)


def meta_of(model, opt=None) -> dict:
    """The metadata save_checkpoint would write for ``model`` (for hand-made archives)."""
    meta = {"format_version": FORMAT_VERSION, "model_type": type(model).__name__,
            "config": model.config.to_dict(), "model_rng": model.rng.state_dict()}
    if opt is not None:
        sd = opt.state_dict()
        meta["optimizer"] = {**{k: v for k, v in sd.items() if k != "state"}, "state_names": sorted(sd["state"])}
    return meta


def archive_arrays(model, opt=None) -> dict:
    arrays = {f"weights/{k}": v for k, v in model.state_dict().items()}
    if opt is not None:
        for name, slots in opt.state_dict()["state"].items():
            for slot, arr in slots.items():
                arrays[f"optim/{name}/{slot}"] = arr
    return arrays
