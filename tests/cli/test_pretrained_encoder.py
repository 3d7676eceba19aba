"""``train property --encoder``'s checks and loading, on a checkpoint pretrained by minitransformer 0.2.0
(tests/checkpoint/written_by_0_2_0: an ``Encoder`` with its heads, read as a ``PropertyModel``) and on a
``MaskedLM`` saved as today's pretraining saves it."""
from pathlib import Path

import numpy as np
import pytest

from minitransformer.checkpoint import save_checkpoint
from minitransformer.cli.pretrained_encoder import EXCLUDES_TABLE, check_encoder, load_encoder, table_fingerprint
from minitransformer.models import EncoderConfig, MaskedLM, fine_tuning_model

OLD = Path(__file__).parents[1] / "checkpoint" / "written_by_0_2_0" / "encoder-0.2.0-pretrain.npz"
TABLE = ["CCO", "CC(=O)N", "c1ccccc1O"]  # the table the 0.2.0 encoder was pretrained beside


def test_a_0_2_0_pretraining_checkpoint_gives_its_encoder_to_a_fine_tuning_run():
    assert check_encoder(str(OLD)).model_type == "PropertyModel"
    encoder = load_encoder(str(OLD), TABLE)
    assert set(encoder.config) == {f for f in EncoderConfig.__dataclass_fields__}
    assert encoder.weights and all(k.startswith(("embed.", "blocks.", "ln_f.")) for k in encoder.weights)
    model = fine_tuning_model(encoder.config, encoder.weights, n_outputs=12, n_features=3, attn_dropout=0.2, seed=4)
    assert model.config.attn_dropout == 0.2 and model.head.out.weight.shape == (4 + 3, 12)
    for name, w in encoder.weights.items():
        np.testing.assert_array_equal(model.encoder.state_dict()[name], w, err_msg=name)
    with pytest.raises(ValueError, match="another labelled table"):
        load_encoder(str(OLD), TABLE[:2])


def test_a_masked_lm_pretraining_checkpoint_gives_its_encoder(tmp_path):
    from minitransformer.chem import Vocab
    vocab = Vocab.build(TABLE, extras=(Vocab.CLS, Vocab.MASK))
    masked = MaskedLM(EncoderConfig(vocab_size=len(vocab), pad_id=vocab.pad_id, d_model=8, n_heads=2, d_ff=8,
                                    max_len=12, n_layers=1, tie_embeddings=False))
    run = {EXCLUDES_TABLE: True, "table_sha256": table_fingerprint(TABLE)}
    path = save_checkpoint(tmp_path / "last.npz", masked, vocab=vocab, extra={"phase": "pretrain", "run": run})
    encoder = load_encoder(str(path), TABLE)
    assert encoder.config == masked.encoder.config.to_dict()
    assert sorted(encoder.weights) == sorted(masked.encoder.state_dict())
    with pytest.raises(ValueError, match="do not fit|does not fit"):
        fine_tuning_model(encoder.config, {k: v for k, v in encoder.weights.items() if k != "ln_f.bias"}, n_outputs=2)
