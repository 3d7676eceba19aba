"""Hostile checkpoints (minitransformer.checkpoint.limits): refused before they can
allocate much memory; crafted metadata and integer arrays refused in one line naming the
file and the entry."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from minitransformer.checkpoint import (
    CheckpointError, load_checkpoint, model_from_checkpoint, save_checkpoint,
)
from minitransformer.models import DecoderLM
from minitransformer.optim import Adam
from checkpoint_helpers import archive_arrays, make_model, meta_of, refuse, V, Vocab, write_npz


# ---------------------------------------------------------------------------
# hostile checkpoints are refused before they can allocate much memory
# ---------------------------------------------------------------------------
def test_declared_parameter_count_is_an_upper_bound():
    """The bound computed from a config's fields is never below the real model's size."""
    from minitransformer.checkpoint import declared_parameters
    cases = [make_model("DecoderLM"), make_model("DecoderLM", tie_embeddings=True, bias=False, d_head=12),
             make_model("MaskedLM"), make_model("MaskedLM", pos="sinusoidal", tie_embeddings=False),
             make_model("PropertyModel"), make_model("PropertyModel", n_features=5, head_hidden=7),
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
    meta = meta_of(model)
    meta["config"].update(change)
    path = write_npz(tmp_path / "huge.npz", meta, **archive_arrays(model))

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
    arrays = archive_arrays(model)
    path = write_npz(tmp_path / "liar.npz", meta_of(model), **arrays)
    header = {"descr": "<f8", "fortran_order": False, "shape": (10**12,)}
    import io
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    with zipfile.ZipFile(path, "a") as zf:
        zf.writestr("weights/extra.npy", buf.getvalue() + bytes(80))
    msg = refuse(path, target, "weights/extra.npy")
    assert "declares" in msg and "\n" not in msg


def test_weight_shapes_are_checked_against_the_config_before_the_weights_are_read(tmp_path, monkeypatch):
    from minitransformer.checkpoint import files
    model = make_model("DecoderLM")
    arrays = archive_arrays(model)
    arrays["weights/embed.tok.weight"] = np.zeros((V, 160), np.float32)  # the config says (V, 16)
    path = write_npz(tmp_path / "wide.npz", meta_of(model), **arrays)
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


@pytest.mark.parametrize("kind", ["LSTMLM", "RNNSeq2Seq", "DecoderLM"])
def test_a_max_len_no_sampler_could_finish_is_refused_for_every_model_kind(tmp_path, kind):
    """An LSTM's max_len costs no parameter, so the parameter limit let a forged 10**9 through and
    `sample` decoded for hours; every kind's max_len now has its own limit."""
    from minitransformer.checkpoint import limits
    from minitransformer.models.lstm_lm import LSTMLM, LSTMLMConfig
    from minitransformer.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig
    small = dict(d_model=8, hidden=8, n_layers=1, max_len=16)
    model = {"LSTMLM": lambda: LSTMLM(LSTMLMConfig(vocab_size=V, **small)),
             "RNNSeq2Seq": lambda: RNNSeq2Seq(RNNSeq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, **small)),
             "DecoderLM": lambda: make_model("DecoderLM", n_layers=1)}[kind]()
    meta = meta_of(model)
    meta["config"]["max_len"] = 10**9 if kind != "DecoderLM" else limits.MAX_SEQUENCE_LENGTH + 1
    path = write_npz(tmp_path / "long.npz", meta, **archive_arrays(model))
    with pytest.raises(CheckpointError, match=r"max_len=.*above MAX_SEQUENCE_LENGTH") as info:
        model_from_checkpoint(path)
    assert "\n" not in str(info.value)
    meta["config"]["max_len"] = limits.MAX_SEQUENCE_LENGTH if kind != "DecoderLM" else 16
    model_from_checkpoint(write_npz(tmp_path / "fine.npz", meta, **archive_arrays(model)))
