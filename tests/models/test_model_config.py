"""Model configs: JSON round trips, unknown keys, validation; a model rebuilt from a
config's JSON has the same parameter names, shapes and (seeded) values; configs
saved before the relative-position options still load."""
import json

import numpy as np
import pytest

from minitransformer.models import (
    DecoderLM, DecoderLMConfig, Encoder, EncoderConfig, PropertyModel, PropertyModelConfig, Seq2Seq, Seq2SeqConfig,
)

CONFIGS = [
    DecoderLMConfig(vocab_size=11),
    DecoderLMConfig(vocab_size=11, d_model=8, n_heads=2, d_head=8, n_layers=1, d_ff=12, max_len=10,
                    norm="post", activation="relu", pos="sinusoidal", tie_embeddings=True,
                    emb_dropout=0.1, attn_dropout=0.2, resid_dropout=0.3, ff_dropout=0.4, bias=False,
                    pad_id=3, bos_id=4, eos_id=5, seed=9),
    DecoderLMConfig.tomczak(vocab_size=112),
    EncoderConfig(vocab_size=11),
    EncoderConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=12, max_len=10, norm="post",
                  activation="gelu_tanh", final_norm=True, tie_embeddings=False, seed=2),
    PropertyModelConfig(vocab_size=11, d_model=8, n_heads=2, n_layers=1, d_ff=12, max_len=10, n_outputs=3,
                        n_features=2, head_hidden=4, seed=2),
    Seq2SeqConfig(src_vocab_size=7, tgt_vocab_size=11),
    Seq2SeqConfig(src_vocab_size=11, tgt_vocab_size=11, d_model=8, n_heads=2, d_head=3,
                  n_enc_layers=1, n_dec_layers=3, d_ff=12, max_len=10, norm="post", pos="learned",
                  share_embeddings=True, tie_embeddings=True, final_norm=False, seed=5),
    DecoderLMConfig(vocab_size=11, pos="relative", relative_max_distance=4),
    EncoderConfig(vocab_size=11, pos="relative", relative_bias="alibi"),
    Seq2SeqConfig(src_vocab_size=7, tgt_vocab_size=11, pos="learned", relative_bias="learned",
                  relative_max_distance=3),
]
BUILD = {DecoderLMConfig: DecoderLM, EncoderConfig: Encoder, PropertyModelConfig: PropertyModel, Seq2SeqConfig: Seq2Seq}


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: type(c).__name__)
def test_json_round_trip(cfg):
    text = cfg.to_json()
    data = json.loads(text)  # plain JSON
    assert data == cfg.to_dict()
    back = type(cfg).from_json(text)
    assert back == cfg and back.to_json() == text
    assert type(cfg).from_dict(cfg.to_dict()) == cfg
    assert isinstance(back.final_norm, bool)  # resolved at construction, stored as a bool
    assert back.relative_bias in ("none", "learned", "alibi")  # resolved likewise, stored as a string


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: type(c).__name__)
def test_config_saved_before_relative_positions_still_loads(cfg):
    """A config written before relative_bias / relative_max_distance existed lacks both
    keys: the defaults fill them in (no bias, M = 16) and the model is built as before."""
    if cfg.pos == "relative":
        return
    old = {k: v for k, v in cfg.to_dict().items() if not k.startswith("relative_")}
    back = type(cfg).from_dict(old)
    assert (back.relative_bias, back.relative_max_distance) == ("none", 16)
    if cfg.relative_bias == "none":
        assert back == cfg


@pytest.mark.parametrize("opts,bias", [
    (dict(), "none"), (dict(pos="relative"), "learned"), (dict(pos="relative", relative_bias="alibi"), "alibi"),
    (dict(pos="sinusoidal", relative_bias="learned"), "learned"),
])
def test_relative_bias_default_follows_pos(opts, bias):
    assert DecoderLMConfig(vocab_size=11, **opts).relative_bias == bias


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: type(c).__name__)
def test_unknown_keys_raise(cfg):
    data = cfg.to_dict()
    data["n_experts"] = 4
    data["rope"] = True
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['n_experts', 'rope'\]"):
        type(cfg).from_dict(data)
    with pytest.raises(ValueError, match="unknown option"):
        type(cfg).from_json(json.dumps(data))


def test_rebuilt_model_is_identical():
    for cfg in CONFIGS:
        if cfg.d_model > 64:
            continue
        small = type(cfg).from_dict({**cfg.to_dict(), "d_model": 8, "n_heads": 2, "d_ff": 12,
                                     "max_len": 10})
        a = BUILD[type(cfg)](small)
        b = BUILD[type(cfg)](type(cfg).from_json(small.to_json()))
        sa, sb = a.state_dict(), b.state_dict()
        assert list(sa) == list(sb)
        for n in sa:
            np.testing.assert_array_equal(sa[n], sb[n], err_msg=n)


@pytest.mark.parametrize("cls,base", [
    (DecoderLMConfig, dict(vocab_size=11)),
    (EncoderConfig, dict(vocab_size=11)),
    (PropertyModelConfig, dict(vocab_size=11)),
    (Seq2SeqConfig, dict(src_vocab_size=11, tgt_vocab_size=11)),
])
@pytest.mark.parametrize("bad", [
    dict(norm="both"), dict(pos="alibi"), dict(activation="silu"), dict(d_model=10, n_heads=4),
    dict(emb_dropout=-0.1), dict(ff_dropout=1.0), dict(relative_bias="rope"),
    dict(pos="relative", relative_bias="none"), dict(relative_max_distance=0),
    dict(relative_max_distance=2.5), dict(pos="relative", relative_max_distance=True),
])
def test_invalid_options_raise(cls, base, bad):
    with pytest.raises(ValueError):
        cls(**base, **bad)


# ---------------------------------------------------------------------------
# every field is validated at construction, and the message names the field
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("make, field, bad", [
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "n_heads", 0),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "d_model", "16"),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "d_model", 16.0),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "n_layers", 0),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "max_len", -1),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "d_head", 0),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "pad_id", 10),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "bos_id", 12),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "eos_id", -1),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "seed", -1),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "tie_embeddings", 1),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "emb_dropout", float("nan")),
    (lambda **kw: DecoderLMConfig(vocab_size=10, **kw), "norm", None),
    (lambda **kw: DecoderLMConfig(**{"vocab_size": 0, **kw}), "vocab_size", 0),
    (lambda **kw: PropertyModelConfig(vocab_size=10, **kw), "n_outputs", -2),
    (lambda **kw: PropertyModelConfig(vocab_size=10, **kw), "n_outputs", 0),
    (lambda **kw: PropertyModelConfig(vocab_size=10, **kw), "head_hidden", 1.5),
    (lambda **kw: EncoderConfig(vocab_size=10, **kw), "tie_embeddings", "yes"),
    (lambda **kw: Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=3, **kw), "eos_id", 3),
    (lambda **kw: Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, **kw), "n_dec_layers", 0),
])
def test_every_config_field_is_validated_by_name(make, field, bad):
    with pytest.raises(ValueError, match=field):
        make(**{field: bad})


# ---------------------------------------------------------------------------
# degenerate shapes: a clear ValueError at the model's boundary, or a correct result
# ---------------------------------------------------------------------------
def _tiny(kind):
    kw = dict(d_model=8, n_heads=2, d_ff=8, max_len=8)
    if kind == "lm":
        return DecoderLM(DecoderLMConfig(vocab_size=10, **kw))
    if kind == "enc":
        return PropertyModel(PropertyModelConfig(vocab_size=10, n_outputs=2, **kw))
    return Seq2Seq(Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, **kw))


@pytest.mark.parametrize("call, message", [
    (lambda: _tiny("lm")(np.zeros((2, 0), dtype=np.int64)), "length 0"),
    (lambda: _tiny("enc")(np.zeros((2, 0), dtype=np.int64)), "length 0"),
    (lambda: _tiny("s2s")(np.zeros((2, 0), dtype=np.int64), np.ones((2, 3), dtype=np.int64)), "source: sequences of length 0"),
    (lambda: _tiny("s2s")(np.ones((2, 3), dtype=np.int64), np.ones((3, 3), dtype=np.int64)), "one target per source"),
    (lambda: _tiny("lm").log_prob(np.ones((2, 1), dtype=np.int64)), "at least 2 tokens"),
    (lambda: _tiny("lm")(np.ones((2, 9), dtype=np.int64)), "exceeds max_len=8"),
])
def test_degenerate_shapes_raise_a_clear_error(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_an_empty_batch_runs_forward_and_backward():
    for kind in ("lm", "enc"):
        model = _tiny(kind)
        out = model(np.zeros((0, 3), dtype=np.int64))
        assert out.shape == ((0, 3, 10) if kind == "lm" else (0, 2))
        model.backward(np.zeros_like(out))
        assert all(np.all(np.asarray(p.grad) == 0) for p in model.parameters())
