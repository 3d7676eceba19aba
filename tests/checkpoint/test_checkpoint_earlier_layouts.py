"""Checkpoints written by minitransformer 0.2.0 still load (checkpoint/earlier_layouts.py).

``written_by_0_2_0/`` holds four tiny checkpoints saved by 0.2.0's own code (its ``Encoder``
with the heads inside, switched per call; D = 4, one block, a 14-token vocabulary), and
``encoder-0.2.0-outputs.npz``, the outputs that code gave on ``ids`` (and ``features``), in float32
with the fast kernels (the reference kernels round differently, by about 1e-7: ``CLOSE``):

* ``property``: a fine-tuned property model of a ``--pretrain`` run: both heads, the masked-token
  one untied, a hidden layer, two descriptors, the removed options ``pooling``/``n_aux`` at their
  defaults, and its optimizer's state;
* ``pretrain``: a pretraining checkpoint (what ``--encoder`` reads): a tied masked-token head and
  an untrained pooled one;
* ``mlm``: a masked language model alone (untied); ``bare``: an encoder with no head.
"""
from pathlib import Path

import numpy as np
import pytest

from minitransformer.checkpoint import CheckpointError, load_checkpoint, model_from_checkpoint, restore
from minitransformer.models import MaskedLM, fine_tuning_model
from minitransformer.optim import Adam

HERE = Path(__file__).parent / "written_by_0_2_0"
CLOSE = dict(rtol=1e-5, atol=1e-6)  # float32, either kernel set
OUTPUTS = np.load(HERE / "encoder-0.2.0-outputs.npz")


def _path(name):
    return HERE / f"encoder-0.2.0-{name}.npz"


@pytest.mark.parametrize("name, model_type, output", [
    ("property", "PropertyModel", "property"), ("pretrain", "PropertyModel", "pretrain_cls"),
    ("mlm", "MaskedLM", "mlm"), ("bare", "Encoder", "bare"),
])
def test_a_0_2_0_checkpoint_loads_as_todays_model_and_predicts_as_it_did(name, model_type, output):
    model, ckpt = model_from_checkpoint(_path(name))
    assert type(model).__name__ == ckpt.model_type == model_type
    assert ckpt.meta["upgraded_from"].startswith("Encoder") and ckpt.optimizer_state() is None
    assert not {"mlm_head", "pooling", "n_aux"} & set(ckpt.config)
    kwargs = {"features": OUTPUTS["features"]} if model_type == "PropertyModel" else {}
    np.testing.assert_allclose(np.asarray(model(OUTPUTS["ids"], **kwargs)), OUTPUTS[output], **CLOSE)


def test_the_weights_are_renamed_and_the_pretraining_head_of_a_property_model_left_out():
    names = set(load_checkpoint(_path("property")).weights)
    assert {"encoder.embed.tok.weight", "encoder.ln_f.bias", "head.hidden.weight", "head.out.bias"} <= names
    assert not any(n.startswith(("mlm.", "cls", "embed.", "blocks.")) for n in names)
    assert "head.proj.linear.weight" in load_checkpoint(_path("mlm")).weights
    assert "embed.tok.weight" in load_checkpoint(_path("bare")).weights


def test_a_0_2_0_pretraining_encoder_fine_tunes_and_still_predicts_masked_tokens():
    """--encoder takes the encoder of a 0.2.0 pretraining checkpoint: a property model around it holds
    its weights, and a masked-token head tied to it gives 0.2.0's masked-token logits."""
    model, _ = model_from_checkpoint(_path("pretrain"))
    encoder = model.encoder
    tuned = fine_tuning_model(encoder.config.to_dict(), encoder.state_dict(), n_outputs=5, head_hidden=2, seed=1)
    assert tuned.head.out.weight.shape == (2, 5)
    for n, w in encoder.state_dict().items():
        np.testing.assert_array_equal(tuned.encoder.state_dict()[n], w, err_msg=n)
    masked = MaskedLM(encoder.config, encoder=encoder).eval()
    np.testing.assert_allclose(np.asarray(masked(OUTPUTS["ids"])), OUTPUTS["pretrain"], **CLOSE)


def test_a_0_2_0_run_cannot_be_resumed_and_says_so_in_one_line():
    model, ckpt = model_from_checkpoint(_path("property"))
    with pytest.raises(CheckpointError, match="0.2.0.*training cannot be resumed") as info:
        restore(model, ckpt, Adam(model, lr=1e-3))
    assert "\n" not in str(info.value)


def test_a_0_2_0_encoder_made_with_a_removed_head_option_is_refused(tmp_path):
    """Saved with pooling or n_aux at other than their defaults, the model cannot be made: one line names it."""
    import json
    with np.load(_path("bare")) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["__meta__"].tobytes())
    meta["config"]["pooling"] = "cls+mean"
    arrays["__meta__"] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    with pytest.raises(CheckpointError, match=r"old.npz: its Encoder was made with pooling='cls\+mean'"):
        load_checkpoint(tmp_path / "old.npz")


def test_todays_checkpoints_are_not_touched(tmp_path):
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.checkpoint.earlier_layouts import upgrade
    model, _ = model_from_checkpoint(_path("bare"))
    ckpt = load_checkpoint(save_checkpoint(tmp_path / "new.npz", model))
    assert "upgraded_from" not in ckpt.meta and upgrade(ckpt.meta) == (ckpt.meta, None)
