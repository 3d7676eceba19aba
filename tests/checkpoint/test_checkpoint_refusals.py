"""Bad checkpoints are refused with a clear CheckpointError, and the model and optimizer
they were meant for are left exactly as they were."""
from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from minitransformer.checkpoint import (
    FORMAT_VERSION, CheckpointError, load_checkpoint, model_from_checkpoint, save_checkpoint,
)
from minitransformer.optim import SGD, Adam
from checkpoint_helpers import (
    assert_same_weights, load_into, make_model, refuse, train_steps, weights, write_npz,
)


@pytest.mark.parametrize("keep", [0.5, 0.9, -22, 1, 3, 0.0])
def test_truncated_file(tmp_path, target, keep):
    src = make_model("DecoderLM", seed=5)
    path = save_checkpoint(tmp_path / "t.npz", src, Adam(src))
    data = path.read_bytes()
    n = int(len(data) * keep) if isinstance(keep, float) else (keep if keep > 0 else len(data) + keep)
    path.write_bytes(data[:n])
    msg = refuse(path, target, "truncated or corrupted")
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
    refuse(path, target, "truncated or corrupted")


def test_random_npz_is_not_a_checkpoint(tmp_path, target):
    path = write_npz(tmp_path / "r.npz", a=np.arange(3.0), b=np.ones((2, 2)))
    msg = refuse(path, target, "not a minitransformer checkpoint")
    assert "__meta__" in msg


@pytest.mark.parametrize("content", [b"epoch,loss\n1,0.5\n2,0.4\n", b"\x93NUMPY not really", b"{}"])
def test_other_files_are_not_checkpoints(tmp_path, target, content):
    path = tmp_path / "notes.npz"
    path.write_bytes(content)
    refuse(path, target, "not a minitransformer checkpoint")


def test_plain_npy_is_not_a_checkpoint(tmp_path, target):
    path = tmp_path / "w.npy"
    np.save(path, np.arange(10))
    refuse(path, target, "not a minitransformer checkpoint")


@pytest.mark.parametrize("meta_bytes, match", [
    (b"\xff\xfe not utf-8", "not valid JSON"),
    (b"{broken json", "not valid JSON"),
    (b"[1, 2, 3]", "not a minitransformer checkpoint"),
    (b'{"model_type": "DecoderLM"}', "no format version"),
])
def test_bad_metadata(tmp_path, target, meta_bytes, match):
    path = tmp_path / "m.npz"
    np.savez(path, __meta__=np.frombuffer(meta_bytes, dtype=np.uint8))
    refuse(path, target, match)


def test_newer_format_version_is_refused(tmp_path, target):
    model, _ = target
    meta = {"format_version": FORMAT_VERSION + 1, "model_type": "DecoderLM", "config": model.config.to_dict()}
    arrays = {f"weights/{k}": v for k, v in model.state_dict().items()}
    path = write_npz(tmp_path / "future.npz", meta, **arrays)
    msg = refuse(path, target, f"format {FORMAT_VERSION + 1}")
    assert "upgrade" in msg


def test_different_architecture_lists_names_and_shapes(tmp_path, target):
    wide = make_model("DecoderLM", d_model=32, n_heads=2, n_layers=3)
    path = save_checkpoint(tmp_path / "wide.npz", wide, Adam(wide))
    msg = refuse(path, target, "different architecture")
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
    enc = make_model("MaskedLM")
    path = save_checkpoint(tmp_path / "enc.npz", enc)
    model = make_model("DecoderLM", seed=4)
    before = weights(model)
    with pytest.raises(CheckpointError, match="model type: checkpoint MaskedLM, model DecoderLM"):
        load_into(model, path)
    assert_same_weights(weights(model), before)


def test_pickled_objects_are_refused_not_executed(tmp_path, target):
    model, _ = target
    meta = {"format_version": FORMAT_VERSION, "model_type": "DecoderLM"}
    arrays = {f"weights/{k}": v for k, v in model.state_dict().items()}
    arrays["weights/payload"] = np.array([{"evil": print}, None], dtype=object)
    path = write_npz(tmp_path / "evil.npz", meta, **arrays)
    msg = refuse(path, target, "pickled")
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
    refuse(path, target, match)


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        load_checkpoint("/nonexistent/ck.npz")


@pytest.mark.parametrize("edit", ["rename", "swap"])
def test_a_vocabulary_edited_after_saving_is_refused(tmp_path, edit):
    """A token renamed, or two swapped, would read every molecule with the wrong embeddings: the vocabulary's
    checksum, saved beside it, no longer matches and the checkpoint is refused in one line."""
    from minitransformer.checkpoint import CheckpointError, save_checkpoint
    from minitransformer.chem import Vocab
    from minitransformer.models import PropertyModel, PropertyModelConfig
    vocab = Vocab.build(["CCO", "c1ccccc1", "CC(=O)N"], extras=(Vocab.CLS, Vocab.MASK))
    model = PropertyModel(PropertyModelConfig(vocab_size=len(vocab), pad_id=vocab.pad_id, n_outputs=1, n_layers=1,
                                              d_model=16, n_heads=2, d_ff=32, max_len=20))
    path = save_checkpoint(tmp_path / "e.npz", model, vocab=vocab)
    assert load_checkpoint(path).vocab == vocab.to_json()
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes())
    tokens = meta["vocab"]["tokens"]
    i, j = tokens.index("C"), tokens.index("c")
    if edit == "rename":
        tokens[i] = "Q"
    else:
        tokens[i], tokens[j] = tokens[j], tokens[i]
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="its vocabulary is not the one it was saved with"):
        load_checkpoint(path)


def test_a_free_form_vocabulary_with_number_keys_loads_as_saved(tmp_path):
    """JSON turns a dict's number keys into strings: the checksum check reads the library's vocabularies only."""
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.models import DecoderLM, DecoderLMConfig
    model = DecoderLM(DecoderLMConfig(vocab_size=12, max_len=8, d_model=16, n_heads=2, n_layers=1, d_ff=32))
    path = save_checkpoint(tmp_path / "m.npz", model, vocab={i: t for i, t in enumerate("abcdefghijkl")})
    assert load_checkpoint(path).vocab == {str(i): t for i, t in enumerate("abcdefghijkl")}
