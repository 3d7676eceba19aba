"""A training recipe is typed and checked when it is built: a bad field is refused by name."""
import dataclasses

import pytest

from minitransformer.models import DecoderLMConfig, LSTMLMConfig
from minitransformer.train.recipe import LMRecipe, PropertyRecipe, Recipe, Seq2SeqRecipe, model, unsized


def model_of(**changes):
    return model(DecoderLMConfig, **changes)


@pytest.mark.parametrize("field, value", [("lr", 0.0), ("lr", float("nan")), ("batch_size", 0), ("epochs", 1.5),
                                          ("augment", 1.5), ("optimizer", "sgd"), ("schedule", "linear"),
                                          ("arch", "gru"), ("max_time", -1), ("patience", 0), ("model", "big")])
def test_a_bad_common_field_is_refused_naming_it(field, value):
    with pytest.raises(ValueError, match=rf"recipe\.{field} "):
        Recipe(**{"model": model_of(), field: value})


@pytest.mark.parametrize("kind, field, value", [(LMRecipe, "form", "smiles"), (LMRecipe, "grammar", "strict"),
                                                (LMRecipe, "samples", 0), (LMRecipe, "metric", "val_auc"),
                                                (PropertyRecipe, "tta", 0), (PropertyRecipe, "pretrain_lr", -1.0),
                                                (Seq2SeqRecipe, "val_exact", -1),
                                                (Seq2SeqRecipe, "label_smoothing", 1.5)])
def test_a_bad_command_field_is_refused_naming_it(kind, field, value):
    with pytest.raises(ValueError, match=rf"recipe\.{field} "):
        kind(**{"model": model_of(), field: value})


def test_a_variant_is_checked_again():
    r = LMRecipe(model=model_of())
    assert dataclasses.replace(r, lr=2e-3).lr == 2e-3
    with pytest.raises(ValueError, match="recipe.batch_size"):
        dataclasses.replace(r, batch_size=-4)


def test_the_record_writes_the_model_as_runs_always_recorded_it():
    """A stopped run recorded by an earlier version compares equal on --resume."""
    assert LMRecipe(model=DecoderLMConfig.tomczak(None), arch="tomczak").record()["model"] == "tomczak"
    lstm = LMRecipe(model=unsized(LSTMLMConfig, hidden=32), arch="lstm").record()["model"]
    assert lstm["kind"] == "lstm" and lstm["hidden"] == 32
    record = LMRecipe(model=model_of(n_layers=2)).record()
    assert record["model"]["n_layers"] == 2 and record["lr"] == 1e-3 and "arch" in record
    assert not {"vocab_size", "pad_id", "seed"} & set(record["model"]), "what the data and the seed set is not recorded"


def test_the_model_is_a_typed_config_whose_vocabulary_the_data_gives():
    from minitransformer.chem import Vocab
    from minitransformer.models import DecoderLM
    from minitransformer.train.recipe import sized
    r = LMRecipe(model=model_of(n_layers=1), seed=7)
    with pytest.raises(ValueError, match=r"DecoderLMConfig\.vocab_size is None"):
        DecoderLM(r.model)
    vocab = Vocab.build(["CCO", "c1ccccc1"])
    config = sized(r.model, vocab, r.seed)
    assert (config.vocab_size, config.pad_id, config.bos_id, config.seed) == (len(vocab), vocab.pad_id, vocab.bos_id, 7)
    assert DecoderLM(config).config.n_layers == 1
    with pytest.raises(ValueError, match=r"recipe\.model must be a model's config"):
        LMRecipe(model={"d_model": 64})
